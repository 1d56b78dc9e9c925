"""The operator's commands, run as a user runs them: on a machine without the
application's handler modules, with hostile text in the stored jobs, and on dead
letters in bulk."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
from cli_support import Ran, call_main

pytestmark = pytest.mark.timeout(180)

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]
#: Clears the screen when a terminal obeys it.
CLEAR = "\x1b[2J"
#: Red text and the bell.
RED = "\x1b[31mred\x07"
#: A handler module nobody installed on the operator's machine.
MISSING = "nosuch_app.jobs:tasks"


def config_text(url: str, handlers: str = MISSING) -> str:
    return (
        f'provider = "db"\nurl = "{url}"\nentry_points = false\nhandlers = ["{handlers}"]\n'
        '[workers]\nqueues = ["default", "mail"]\n'
        "[limits.default]\nfair = true\n"
        '[[cron]]\nname = "nightly"\nschedule = "0 3 * * *"\njob_type = "report"\n'
    )


def boom(args: Any) -> None:
    raise ValueError(f"upstream said {RED}")


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    """A config naming a handler module that does not exist, over a SQLite file that
    holds a job with a hostile partition and dead letters with hostile messages."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    (tmp_path / "conveyor.toml").write_text(config_text(url))
    runtime = conveyor.build(
        {
            "provider": "db",
            "url": url,
            "entry_points": False,
            "workers": {"queues": ["default", "mail"]},
        },
        handlers={"explode": boom, "bounce": boom},
        env={},
    )
    for n in range(3):
        runtime.enqueue("explode", {"n": n}, queue="mail", max_retries=0)
    for n in range(2):
        runtime.enqueue("bounce", {"n": n}, queue="mail", max_retries=0)
    runtime.enqueue("explode", {}, queue="default", max_retries=0, tenant_id="acme")
    runtime.worker("mail").drain()
    runtime.worker("default").drain()
    # Enqueue refuses such a partition now; one stored before (or by another writer)
    # is still shown escaped: written here past the check, straight to the queue.
    import attrs

    held = attrs.evolve(runtime.enqueue("report", {}, queue="other"), partition_key=CLEAR)
    runtime.queue.enqueue(attrs.evolve(held, id=uuid.uuid4(), queue="default"))
    runtime.close()
    yield tmp_path


def run_process(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`conveyor *args` in the site's folder, in a process of its own, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    return subprocess.run(
        [*CONVEYOR, *args],
        cwd=site,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def run(
    site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Ran]:
    """`run(site, *args)`: `conveyor *args` in the site's folder, called in this process
    (no terminal on stdin, as under `run_process`)."""
    monkeypatch.chdir(site)
    for name in os.environ:
        if name.startswith("CONVEYOR_"):
            monkeypatch.delenv(name)
    return lambda site, *args: call_main(capsys, *args)


def ok(result: Ran | subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert "cannot import" not in result.stderr and "nosuch_app" not in result.stderr
    return result.stdout


def dead_ids(run: Callable[..., Ran], site: Path) -> list[str]:
    return re.findall(r"^([0-9a-f]{8}-[0-9a-f-]{27}) ", ok(run(site, "dead", "list")), re.M)


# ---- stored text reaches the terminal escaped ---------------------------------------


def test_status_shows_a_hostile_partition_key_escaped(site: Path) -> None:
    out = ok(run_process(site, "status"))
    assert "\x1b" not in out
    assert "\\x1b[2J" in out, out


def test_dead_list_jobs_list_and_job_show_escape_error_messages(
    site: Path, run: Callable[..., Ran]
) -> None:
    listing = ok(run(site, "dead", "list"))
    assert "\x1b" not in listing and "\x07" not in listing
    assert "\\x1b[31mred\\x07" in listing
    jobs = ok(run(site, "jobs", "list", "--state", "dead"))
    assert "\x1b" not in jobs and "\\x1b[31m" in jobs
    job_id = dead_ids(run, site)[0]
    shown = ok(run(site, "job", "show", job_id, "--traceback"))
    assert "\x1b" not in shown and "\x07" not in shown
    assert "\\x1b[31mred\\x07" in shown and "in boom" in shown


def _waits(args: Any) -> None:
    raise TimeoutError("no handler answered for " + "3" * 70 + " ms")


def test_a_message_cut_to_fit_a_listing_shows_where_it_was_cut(
    tmp_path: Path, run: Callable[..., Ran]
) -> None:
    # It was cut without a mark: "for 333" read as the whole figure. The mark is ASCII,
    # which a terminal of any encoding prints.
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    (tmp_path / "conveyor.toml").write_text(config_text(url))
    runtime = conveyor.build({"provider": "db", "url": url}, handlers={"waits": _waits}, env={})
    runtime.enqueue("waits", {}, max_retries=0)
    runtime.drain()
    runtime.close()
    for args in (("dead", "list"), ("jobs", "list", "--state", "dead")):
        listing = ok(run(tmp_path, *args))
        assert "no handler answered for 333" in listing
        assert "3..." in listing and "3 ms" not in listing, listing


def test_json_output_keeps_the_text_and_escapes_it_as_json(
    site: Path, run: Callable[..., Ran]
) -> None:
    import json

    letters = json.loads(ok(run(site, "dead", "list", "--json")))
    assert any(RED in (d["last_error"] or {}).get("message", "") for d in letters)
    assert "\x1b" not in ok(run(site, "dead", "list", "--json"))


def test_escape_keeps_printable_text_and_shows_every_control_character() -> None:
    from conveyor.shell.terminal import escape, escape_lines

    assert escape("plain text, é and 日本") == "plain text, é and 日本"
    assert escape(f"a{CLEAR}b\tc\nd\u202ee\x9b") == "a\\x1b[2Jb\\tc\\nd\\u202ee\\x9b"
    assert escape_lines("line one\x1b]0;title\x07\nline two") == (
        "line one\\x1b]0;title\\x07\nline two"
    )


def test_text_log_lines_escape_control_characters() -> None:
    import logging

    from conveyor.shell.terminal import TerminalFilter

    record = logging.LogRecord("conveyor", logging.WARNING, __file__, 1, "got %s", (RED,), None)
    assert TerminalFilter().filter(record)
    assert logging.Formatter("%(message)s").format(record) == "got \\x1b[31mred\\x07"


# ---- operator commands without the handler modules -------------------------------


def test_operator_commands_run_without_the_handler_modules(
    site: Path, run: Callable[..., Ran]
) -> None:
    ok(run(site, "status"))
    ok(run(site, "dead", "list"))
    ok(run(site, "jobs", "list"))
    ok(run(site, "job", "show", dead_ids(run, site)[0]))
    assert "nightly" in ok(run(site, "cron", "list"))
    ok(run(site, "prune", "--dry-run"))
    job_id = dead_ids(run, site)[0]
    assert job_id in ok(run(site, "dead", "retry", job_id))
    assert ok(run(site, "dead", "purge", dead_ids(run, site)[0])).strip() == "purged 1"


def test_the_worker_still_needs_its_handler_modules(site: Path, run: Callable[..., Ran]) -> None:
    result = run(site, "worker")
    assert result.returncode == 2
    assert "handlers[0]: cannot import 'nosuch_app.jobs'" in result.stderr


def test_the_dashboard_runs_without_the_handler_modules_and_prints_its_address(
    site: Path,
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    process = subprocess.Popen(
        [*CONVEYOR, "dashboard", "--port", str(port)],
        cwd=site,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert f"http://127.0.0.1:{port}/" in line, line
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/dead", timeout=5) as page:
                    body = page.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline, "the dashboard did not answer"
                time.sleep(0.2)
        assert "explode" in body
    finally:
        process.terminate()
        process.wait(20)
        assert process.stderr is not None
        rest = process.stderr.read()
    assert "nosuch_app" not in rest, rest


# ---- dead letters in bulk --------------------------------------------------------


def test_dead_retry_all_takes_queue_and_type_filters(site: Path, run: Callable[..., Ran]) -> None:
    out = ok(run(site, "dead", "retry", "--all", "--queue", "mail", "--type", "explode"))
    assert out.strip() == "re-enqueued 3 dead letters (queue mail, type explode)"
    assert len(dead_ids(run, site)) == 3
    assert ok(run(site, "dead", "retry", "--all")).strip() == "re-enqueued 3 dead letters"
    assert dead_ids(run, site) == []


def test_dead_retry_needs_an_id_or_all_and_not_both(site: Path, run: Callable[..., Ran]) -> None:
    neither = run(site, "dead", "retry")
    assert neither.returncode == 2 and "give a job id, or --all" in neither.stderr
    both = run(site, "dead", "retry", dead_ids(run, site)[0], "--queue", "mail")
    assert both.returncode == 2 and "not both" in both.stderr


def test_dead_purge_all_without_a_terminal_refuses_unless_yes(
    site: Path, run: Callable[..., Ran]
) -> None:
    refused = run(site, "dead", "purge", "--all")
    assert refused.returncode == 2
    assert "would delete 6 dead letters; give --yes" in refused.stderr
    assert len(dead_ids(run, site)) == 6, "nothing was deleted"
    filtered = run(site, "dead", "purge", "--all", "--type", "bounce", "--yes")
    assert ok(filtered).strip() == "purged 2"
    assert ok(run(site, "dead", "purge", "--all", "-y")).strip() == "purged 4"
    assert dead_ids(run, site) == []


def test_dead_purge_all_asks_on_a_terminal(site: Path, run: Callable[..., Ran]) -> None:
    from conveyor.shell import cli

    # The prompt needs a terminal: stand one in for the test's stdin.
    class Tty:
        def isatty(self) -> bool:
            return True

    answers = iter(["n", "yes"])
    import builtins

    before = len(dead_ids(run, site))
    old_stdin, old_input, old_cwd = sys.stdin, builtins.input, os.getcwd()
    asked: list[str] = []
    try:
        os.chdir(site)
        sys.stdin = Tty()  # type: ignore[assignment]
        builtins.input = lambda prompt="": asked.append(prompt) or next(answers)
        assert cli.main(["dead", "purge", "--all"]) == 1
        assert len(dead_ids(run, site)) == before
        assert cli.main(["dead", "purge", "--all"]) == 0
    finally:
        sys.stdin, builtins.input = old_stdin, old_input
        os.chdir(old_cwd)
    assert asked[0] == f"Delete {before} dead letters? This cannot be undone. [y/N] "
    assert dead_ids(run, site) == []


def test_dead_list_says_when_it_shows_only_part(site: Path, run: Callable[..., Ran]) -> None:
    out = ok(run(site, "dead", "list", "--limit", "2"))
    assert out.rstrip().splitlines()[-1] == (
        "showing 2 of 6 dead letters, newest first; --limit N shows more"
    )
    full = ok(run(site, "dead", "list"))
    assert "showing" not in full


def test_jobs_list_says_when_it_shows_only_part(site: Path, run: Callable[..., Ran]) -> None:
    # It stopped at its limit without a word (50 by default, not in --help).
    out = ok(run(site, "jobs", "list", "--limit", "2"))
    assert out.rstrip().splitlines()[-1] == "showing the first 2 jobs; --limit N shows more"
    listed = run(site, "jobs", "list", "--limit", "2", "--json")
    assert len(json.loads(listed.stdout)) == 2
    assert "showing the first 2 jobs; --limit N shows more" in listed.stderr
    full = ok(run(site, "jobs", "list"))
    assert "showing" not in full


@pytest.mark.parametrize("command", [("jobs", "list"), ("dead", "list")])
def test_a_limit_past_what_a_listing_reads_is_refused_naming_it(
    site: Path, run: Callable[..., Ran], command: tuple[str, ...]
) -> None:
    # Passed to the backend: a driver's error (bigint out of range, an integer Redis
    # cannot read, OverflowError on SQLite), told differently on each.
    refused = run(site, *command, "--limit", "99999999999999999999")
    assert refused.returncode == 2
    assert "--limit: must be at most 1,000,000, got 99999999999999999999" in refused.stderr
    assert "Traceback" not in refused.stderr


# ---- a SQLite file the command cannot write names itself ---------------------------


def _sqlite_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = tmp_path / "jobs.db"
    (tmp_path / "conveyor.toml").write_text(
        f'provider = "db"\nurl = "sqlite:///{db}"\nentry_points = false\nlease_ms = 2000\n'
    )
    monkeypatch.chdir(tmp_path)
    for name in os.environ:
        if name.startswith("CONVEYOR_"):
            monkeypatch.delenv(name)
    conveyor.build({"provider": "db", "url": f"sqlite:///{db}"}, env={}).close()
    return db


def test_an_enqueue_into_a_read_only_sqlite_file_names_the_file_not_a_statement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlalchemy

    db = _sqlite_project(tmp_path, monkeypatch)

    # What SQLite answers for a file this process may not write (query_only gives the
    # same SQLITE_READONLY that file permissions do, also to root).
    def read_only(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA query_only = ON")

    sqlalchemy.event.listen(sqlalchemy.Engine, "connect", read_only)
    try:
        result = call_main(capsys, "enqueue", "hello", "{}")
    finally:
        sqlalchemy.event.remove(sqlalchemy.Engine, "connect", read_only)
    assert result.returncode == 1
    assert str(db) in result.stderr and "read-only" in result.stderr, result.stderr
    assert "INSERT" not in result.stderr and "sqlalche.me" not in result.stderr


def test_an_enqueue_into_a_sqlite_file_locked_too_long_names_the_file_and_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    db = _sqlite_project(tmp_path, monkeypatch)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's long write transaction
    try:
        result = call_main(capsys, "enqueue", "hello", "{}")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.returncode == 1
    assert str(db) in result.stderr and "locked" in result.stderr, result.stderr
    assert "0.5 s" in result.stderr and "lease_ms" in result.stderr, result.stderr
    assert "INSERT" not in result.stderr and "sqlalche.me" not in result.stderr
