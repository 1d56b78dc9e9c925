"""The `conveyor` CLI on SQLite and Redis: each command called in-process (`main(argv)`,
its output captured), and end to end as a user runs it, in a process of its own, once
per command family (a worker, `enqueue`, `status`, `dead`, the exit code of bad input,
the demo, a closed pipe)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import conveyor
import pytest
from cli_support import CONVEYOR, Ran, cli, cli_project, process_env, run_process

__all__ = ["cli", "cli_project"]  # the fixtures these tests use


def _status(cli: Callable[..., Ran]) -> dict:
    return json.loads(cli("status", "--json").stdout)


def _row(status: dict, queue: str) -> dict:
    return next(q for q in status["queues"] if q["queue"] == queue)


def _worker(project: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CONVEYOR, "worker"],
        cwd=project,
        env=process_env(project),
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_worker_processes_jobs_another_process_enqueued(cli_project, cli) -> None:
    ids = [run_process(cli_project, "enqueue", "ship", json.dumps({"n": 0})).stdout.strip()]
    ids += [cli("enqueue", "ship", json.dumps({"n": i})).stdout.strip() for i in range(1, 5)]
    assert len(set(ids)) == 5
    assert _row(_status(cli), "default")["ready"] == 5
    worker = _worker(cli_project)
    out = cli_project / "out.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        not out.exists() or len(out.read_text().splitlines()) < 5
    ):
        time.sleep(0.05)
    live = json.loads(run_process(cli_project, "status", "--json").stdout)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, worker.stderr.read() if worker.stderr else ""
    assert sorted(json.loads(line)["n"] for line in out.read_text().splitlines()) == list(range(5))
    row = _row(live, "default")
    assert row["pollers"], "the live worker shows up as a poller"
    assert _row(_status(cli), "default")["ready"] == 0


def test_status_flags_a_queue_with_work_and_no_poller(cli) -> None:
    cli("enqueue", "ship", "{}", "--queue", "orphans")
    status = _status(cli)
    assert _row(status, "orphans")["flagged"] is True
    text = cli("status").stdout
    assert "orphans" in text and "NO LIVE WORKER" in text
    assert cli("status", "--strict", check=False).returncode == 1


def test_dead_letters_list_show_retry_and_purge(cli_project, cli) -> None:
    job_id = cli("enqueue", "explode", json.dumps({"secret": "s3cr3t-canary"})).stdout.strip()
    worker = _worker(cli_project)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _row(_status(cli), "default")["dead"] == 0:
        time.sleep(0.1)
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)
    listing = run_process(cli_project, "dead", "list").stdout
    assert job_id in listing and "cannot ship to the moon" in listing
    assert cli("dead", "list").stdout == listing
    shown = json.loads(cli("dead", "show", job_id).stdout)
    assert shown["last_error"]["message"] == "cannot ship to the moon"
    assert "s3cr3t-canary" not in json.dumps(shown), "args stay hidden unless asked"
    assert "s3cr3t-canary" in cli("dead", "show", job_id, "--show-args").stdout
    assert job_id in cli("dead", "retry", job_id).stdout
    assert _row(_status(cli), "default")["ready"] == 1
    assert cli("dead", "purge", "--all").stdout.strip() == "purged 0"


@pytest.mark.parametrize("command", ["show", "retry", "purge"])
def test_dead_commands_on_a_job_that_is_no_dead_letter_say_what_it_is(cli, command) -> None:
    # `dead retry` answered such an id as bad input (exit 2), `dead purge` with "purged 0"
    # (exit 0): each now says what the job is, as `dead show` and `job show` do.
    pending = cli("enqueue", "ship", "{}").stdout.strip()
    cancelled = cli("enqueue", "ship", "{}").stdout.strip()
    cli("job", "cancel", cancelled)
    for job_id, state in ((pending, "pending"), (cancelled, "cancelled")):
        shown = cli("dead", command, job_id, check=False)
        assert shown.returncode == 1 and shown.stdout == ""
        assert shown.stderr == (
            f"conveyor: job {job_id} is not a dead letter: it is {state} "
            f"(conveyor job show {job_id})\n"
        )
    assert json.loads(cli("job", "show", pending, "--json").stdout)["state"] == "pending"
    unknown = cli("dead", command, "00000000-0000-4000-8000-000000000009", check=False)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.startswith(
        "conveyor: no job 00000000-0000-4000-8000-000000000009: it was never enqueued here"
    ), unknown.stderr


def test_a_dead_letter_a_waiting_job_depends_on_is_kept_by_purge_saying_why(cli) -> None:
    # Purged, it read as unfinished to its dependent, which then waited for ever.
    rt = conveyor.build()  # the project's config, as the commands read it
    try:
        dead = rt.enqueue("explode", {})
        later = rt.enqueue("ship", {"n": 1}, delay=3600)
        after = [conveyor.dep(dead, on_failure="ignore"), conveyor.dep(later, on_failure="ignore")]
        waiting = rt.enqueue("ship", {"n": 2}, after=after)
        rt.drain()
        assert rt.get(dead.id).state.value == "failed"
    finally:
        rt.close()
    one = cli("dead", "purge", str(dead.id), check=False)
    assert one.returncode == 1 and f"dead letter {dead.id} is kept" in one.stderr, one.stderr
    assert cli("dead", "purge", "--all", "--yes").stdout == (
        "purged 0; 1 kept: jobs still queued depend on them\n"
    )
    view = json.loads(cli("job", "show", str(waiting.id), "--json").stdout)
    assert view["state"] == "waiting"


def test_jobs_list_keeps_one_tenants_jobs(cli) -> None:
    ours = [cli("enqueue", "ship", "{}", "--tenant", "acme").stdout.strip() for _ in range(2)]
    cli("enqueue", "ship", "{}", "--tenant", "globex")
    cli("enqueue", "ship", "{}")
    listed = json.loads(cli("jobs", "list", "--tenant", "acme", "--json").stdout)
    assert sorted(v["id"] for v in listed) == sorted(ours)
    refused = cli("jobs", "list", "--tenant", "bad tenant!", check=False)
    assert refused.returncode == 2 and "--tenant" in refused.stderr


def test_job_show_shows_a_jobs_own_timeout(cli) -> None:
    # Set with --timeout, it was shown nowhere but in Python.
    timed = cli("enqueue", "ship", "{}", "--timeout", "2").stdout.strip()
    plain = cli("enqueue", "ship", "{}").stdout.strip()
    assert json.loads(cli("job", "show", timed, "--json").stdout)["timeout_ms"] == 2000
    assert "timeout: 2 s per attempt" in cli("job", "show", timed).stdout.splitlines()
    assert json.loads(cli("job", "show", plain, "--json").stdout)["timeout_ms"] is None
    assert "timeout:" not in cli("job", "show", plain).stdout


def test_a_command_given_an_id_it_cannot_find_says_whether_retention_pruned_it(cli) -> None:
    # It said "no job X" either way, where `result()` told the two apart.
    rt = conveyor.build()  # the project's config, as the commands read it
    try:
        job = rt.enqueue("ship", {})
        rt.drain()
        assert rt.prune(older_than_ms=0) == 1
    finally:
        rt.close()
    # The dead-letter commands and cancel say it as job show does.
    for command in (("job", "show"), ("dead", "show"), ("dead", "retry"), ("job", "cancel")):
        pruned = cli(*command, str(job.id), check=False)
        assert pruned.returncode == 1 and pruned.stdout == "", command
        assert pruned.stderr.startswith(
            f"conveyor: no job {job.id}: its record was pruned by retention at "
        ), (command, pruned.stderr)
    unknown = cli("job", "show", "00000000-0000-4000-8000-000000000009", check=False)
    assert unknown.returncode == 1
    assert unknown.stderr == (
        "conveyor: no job 00000000-0000-4000-8000-000000000009: it was never enqueued here "
        "(or was purged, or pruned longer ago than retention.remember_pruned_ms)\n"
    )


def test_status_for_a_tenant_says_which_counts_are_that_tenants(cli) -> None:
    # The docs said it showed one tenant's jobs only; only the dead letters are.
    cli("enqueue", "ship", "{}", "--tenant", "acme")
    cli("enqueue", "ship", "{}", "--tenant", "globex")
    assert _row(json.loads(cli("status", "--tenant", "acme", "--json").stdout), "default")["ready"] == 2
    text = cli("status", "--tenant", "acme").stdout
    assert text.rstrip().endswith(
        "--tenant acme: the dead column counts acme's dead letters only; the other columns "
        "count every tenant's jobs (conveyor jobs list --tenant acme lists acme's)"
    )
    assert "--tenant" not in cli("status").stdout


def test_bad_input_exits_2_naming_the_field(cli_project, cli) -> None:
    result = run_process(cli_project, "enqueue", "bad type!", "{}", check=False)
    assert result.returncode == 2 and "job_type" in result.stderr
    result = cli("enqueue", "ship", "[1,2]", check=False)
    assert result.returncode == 2 and "args" in result.stderr


def test_the_demo_runs_end_to_end(tmp_path) -> None:
    result = subprocess.run(
        [*CONVEYOR, "demo", "--dir", str(tmp_path), "--jobs", "12"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for needle in ("no-handler", "ConnectionError", "charge-card", "send-reminder", "Dead letters"):
        assert needle in result.stdout


DEEP = '{"a":' + "[" * 10_000 + "]" * 10_000 + "}"
NINE_THOUSAND_YEARS = str(9999 * 365 * 86400)

BAD_INPUT = {
    "huge-int": (("enqueue", "ship", '{"n": 1' + "0" * 5000 + "}"), "args"),
    "surrogate-key": (("enqueue", "ship", '{"\\ud800": 1}'), "args"),
    "surrogate-value": (("enqueue", "ship", '{"k": "\\udc00"}'), "args"),
    "nested-10000": (("enqueue", "ship", DEEP), "args"),
    "delay-nan": (("enqueue", "ship", "{}", "--delay", "nan"), "delay"),
    "delay-inf": (("enqueue", "ship", "{}", "--delay", "inf"), "delay"),
    "delay-1e20": (("enqueue", "ship", "{}", "--delay", "1e20"), "delay"),
    "delay-9999-years": (("enqueue", "ship", "{}", "--delay", NINE_THOUSAND_YEARS), "delay"),
    "delay-negative": (("enqueue", "ship", "{}", "--delay=-5"), "delay"),
    "max-retries-text": (("enqueue", "ship", "{}", "--max-retries", "many"), "max-retries"),
    "show-bad-id": (("dead", "show", "not-a-uuid"), "job_id"),
    "retry-bad-id": (("dead", "retry", "not-a-uuid"), "job_id"),
    "purge-bad-id": (("dead", "purge", "not-a-uuid"), "job_id"),
    "dead-list-negative-limit": (("dead", "list", "--limit=-1"), "limit"),
    "dead-list-bad-tenant": (("dead", "list", "--tenant", "../t"), "tenant"),
    "worker-queue-path": (("worker", "-q", "../x"), "queue"),
    "worker-second-queue": (("worker", "-q", "ok", "-q", "a b"), "queue"),
    "worker-negative-count": (("worker", "-n", "-1"), "concurrency"),
    "worker-grace-nan": (("worker", "--grace", "nan"), "grace"),
}


@pytest.mark.timeout(60)  # a worker that started anyway would run until stopped
@pytest.mark.parametrize("case", BAD_INPUT, ids=BAD_INPUT)
def test_bad_input_prints_one_line_naming_the_field_and_exits_2(cli, case) -> None:
    argv, field = BAD_INPUT[case]
    result = cli(*argv, check=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("conveyor: ") and field in lines[0], lines[0]
    assert result.stdout == ""
    assert _row(_status(cli), "default")["ready"] == 0, "nothing was enqueued"


@pytest.mark.parametrize(
    "argv",
    [
        ("enqueue", "ship", "{}", "--delay", "-5s"),
        ("enqueue", "ship", "{}", "--delay", "-1.5m"),
        ("prune", "--dry-run", "--older-than", "-7d"),
    ],
    ids=["delay-5s", "delay-1.5m", "older-than-7d"],
)
def test_a_negative_duration_is_refused_as_a_value_not_taken_for_a_flag(cli, argv) -> None:
    # argparse read `-5s` as an unknown flag and said only "expected one argument".
    result = cli(*argv, check=False)
    assert result.returncode == 2, result.stderr
    told = result.stderr.strip()
    assert f"got '{argv[-1]}'" in told and "expected one argument" not in told, told


def test_a_misspelt_job_type_warns_and_strict_refuses_it(cli, caplog) -> None:
    cli("enqueue", "shp", '{"to": "x"}')
    # In its own process the CLI logs to stderr (see test_fault_secrets); here, to caplog.
    assert "no configured handler module registers job type 'shp'" in caplog.text
    assert "did you mean 'ship'" in caplog.text
    refused = cli("enqueue", "--strict", "shp", "{}", check=False)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "job_type" in lines[0] and "'ship'" in lines[0]
    assert cli("enqueue", "--strict", "ship", "{}").returncode == 0


def test_strict_refuses_to_check_a_type_when_no_handler_module_is_loaded(
    cli, monkeypatch
) -> None:
    # With no handler module (CONVEYOR_HANDLERS empty), --strict let anything through.
    monkeypatch.setenv("CONVEYOR_HANDLERS", "")
    refused = cli("enqueue", "--strict", "anything", "{}", check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "--strict: this config loads no handler module" in refused.stderr
    assert cli("enqueue", "anything", "{}").returncode == 0, "without --strict it is taken"


TASKS = """
import conveyor
tasks = conveyor.Tasks()
@tasks.task(name="receipts.send", queue="emails", priority="high", max_retries=5, timeout=30)
def send(args):
    return None
"""


def test_enqueue_gives_a_task_its_own_defaults_and_flags_override_them(
    cli_project, cli, monkeypatch
) -> None:
    (cli_project / "cli_tasks.py").write_text(TASKS)
    config = cli_project / "conveyor.toml"
    config.write_text(
        config.read_text().replace(
            'handlers = ["cli_handlers:HANDLERS"]',
            'handlers = ["cli_handlers:HANDLERS", "cli_tasks:tasks"]',
        )
    )
    monkeypatch.delitem(sys.modules, "cli_tasks", raising=False)

    def shown(*args: str) -> tuple[str, str, int]:
        job_id = cli("enqueue", "receipts.send", "{}", *args).stdout.split()[-1]
        view = json.loads(cli("job", "show", job_id, "--json").stdout)
        return view["queue"], view["priority"], view["max_retries"]

    assert shown() == ("emails", "high", 5), "the task's defaults, as task.enqueue gives"
    flags = ("--queue", "urgent", "--priority", "low", "--max-retries", "0", "--timeout", "5")
    assert shown(*flags) == ("urgent", "low", 0), "each flag given wins over the task's"
    assert shown("--queue", "urgent") == ("urgent", "high", 5), "the rest stay the task's"
    # A plain handler keeps Runtime.enqueue's defaults.
    job_id = cli("enqueue", "ship", "{}").stdout.split()[-1]
    view = json.loads(cli("job", "show", job_id, "--json").stdout)
    assert (view["queue"], view["priority"], view["max_retries"]) == ("default", "normal", 3)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--tenant", ""), "--tenant: must not be empty"),
        (("--partition", "a\tb"), "--partition: must not hold control"),
        (("--unique-key", "k", "--unique-state", "dead"), "--unique-state: "),
        (("--queue", "no room"), "--queue: may hold only ASCII letters"),
        (("--tenant", "ünï"), "--tenant: may hold only ASCII letters"),
        (("--unique-state", "dead"), "--unique-state: needs --unique-key: it shapes"),
        (("--unique-for", "5"), "--unique-for: needs --unique-key: it shapes"),
        # The value typed is quoted as typed, though it spells an option's name.
        (("--id", "tenant_id"), "--id: 'tenant_id' is not a job id"),
    ],
)
def test_a_bad_enqueue_flag_is_named_as_typed(cli, flags: tuple[str, ...], said: str) -> None:
    ran = cli("enqueue", "ship", "{}", *flags, check=False)
    assert ran.returncode == 2
    assert f"conveyor: invalid input: {said}" in ran.stderr, ran.stderr


def test_enqueue_refuses_null_args_and_a_negative_delay_saying_why(cli) -> None:
    ran = cli("enqueue", "ship", "null", check=False)
    assert ran.returncode == 2 and "args: must be a JSON object (a mapping), got null" in ran.stderr
    for flag in ("--delay", "--timeout"):
        ran = cli("enqueue", "ship", "{}", flag, "-5s", check=False)
        assert ran.returncode == 2
        assert f"argument {flag}: must not be negative, got '-5s'" in ran.stderr, ran.stderr


@pytest.mark.parametrize(
    ("group", "commands"),
    [(("job",), "{show,cancel}"), (("dead",), "{list,show,retry,purge}"), ((), "{worker,")],
)
def test_a_command_group_without_its_command_lists_the_choices(
    cli, group: tuple[str, ...], commands: str
) -> None:
    ran = cli(*group, check=False)
    assert ran.returncode == 2
    assert f"the following arguments are required: {commands}" in ran.stderr, ran.stderr


def test_a_reader_that_stops_early_gets_no_error(cli_project) -> None:
    """`conveyor jobs list | head -1`: the closed pipe is not reported as a failure."""
    rt = conveyor.build(str(cli_project / "conveyor.toml"))
    try:
        rt.enqueue_many("ship", [{"n": i} for i in range(3000)])
    finally:
        rt.close()
    proc = subprocess.Popen(
        [*CONVEYOR, "jobs", "list", "--limit", "3000"],
        cwd=cli_project,
        env=process_env(cli_project),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline()
    proc.stdout.close()  # like head -1
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == "", err
