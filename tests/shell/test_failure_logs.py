"""Failures are heard: one WARNING per failed attempt (with the handler's traceback),
one ERROR per dead letter, never the job's args; `--log-format json` for collectors."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conveyor.core import Policies, RequeuePolicy, RetryPolicy
from conveyor.core.policies import LeasePolicy
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.shell.logs import LOG_TRACEBACK_CHARS, CappedTraceback, JsonFormatter
from conveyor.shell.redact import RedactingFilter
from conveyor.shell.registry import Permanent, Registry
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job
from returns.result import Failure

CANARY = "s3cr3t-canary-in-args"
NO_JITTER = Policies(retry=RetryPolicy(initial_delay_ms=100, max_delay_ms=1000, jitter=False))


def _worker(handlers: dict[str, Any], policies: Policies = NO_JITTER, **kw: Any):
    clock = ManualClock(T0)
    queue, store = MemoryJobQueue(), MemoryJobStore()
    worker = Worker(
        queue, store, Registry(handlers), clock=clock, policies=policies, jitter=lambda: 0.5, **kw
    )
    return worker, queue, store, clock


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "conveyor.worker" and r.levelno == level]


def upstream_down(args: Any) -> None:
    raise ConnectionError("upstream down")


def test_a_failed_attempt_logs_one_warning_with_the_handlers_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker, queue, _, _ = _worker({"work": upstream_down})
    job = make_job(args={"token": CANARY}, max_retries=3)
    queue.enqueue(job)
    with caplog.at_level(logging.DEBUG):
        assert worker.drain() == 1
    [warning] = _records(caplog, logging.WARNING)
    assert not _records(caplog, logging.ERROR), "a retry is not a dead letter"
    message = warning.getMessage()
    assert str(job.id) in message and "(work)" in message and "attempt 1" in message
    assert "ConnectionError: upstream down" in message and "retrying at" in message
    assert warning.exc_info is not None and isinstance(warning.exc_info[1], ConnectionError)
    assert "upstream_down" in caplog.text, "the traceback reaches the handler's frame"
    assert CANARY not in caplog.text


def test_each_attempt_warns_once_and_the_dead_letter_is_one_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker, queue, store, clock = _worker({"work": upstream_down})
    job = make_job(args={"token": CANARY}, max_retries=2)
    queue.enqueue(job)
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            assert worker.drain() == 1
            clock.advance(10_000)
    assert [r.getMessage().split(" failed")[0] for r in _records(caplog, logging.WARNING)] == [
        f"job {job.id} (work) attempt {n}" for n in (1, 2, 3)
    ]
    [error] = _records(caplog, logging.ERROR)
    assert store.list_dead()[0].id == job.id
    assert str(job.id) in error.getMessage() and "(work)" in error.getMessage()
    assert "ConnectionError: upstream down" in error.getMessage()
    assert CANARY not in caplog.text


def test_a_permanent_failure_warns_then_errors_with_its_own_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def refuse(args: Any) -> None:
        raise Permanent("card declined", type="payment-declined")

    worker, queue, _, _ = _worker({"pay": refuse})
    queue.enqueue(make_job("pay", args={"card": CANARY}))
    with caplog.at_level(logging.DEBUG):
        worker.drain()
    [warning] = _records(caplog, logging.WARNING)
    [error] = _records(caplog, logging.ERROR)
    assert "payment-declined: card declined" in warning.getMessage()
    assert isinstance(warning.exc_info[1], Permanent)  # type: ignore[index]
    assert "payment-declined: card declined" in error.getMessage()
    assert getattr(error, "error_type", None) == "payment-declined"
    assert CANARY not in caplog.text


def test_an_exception_without_a_message_is_named_by_its_repr(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Compiled here, not in this module: pytest rewrites the asserts of test files.
    namespace: dict[str, Any] = {}
    exec(compile("def asserts(args):\n    assert args['x'] > 0\n", "jobs.py", "exec"), namespace)

    worker, queue, store, _ = _worker({"work": namespace["asserts"]})
    job = make_job(args={"x": -1}, max_retries=0)
    queue.enqueue(job)
    with caplog.at_level(logging.WARNING):
        worker.drain()
    [warning] = _records(caplog, logging.WARNING)
    assert "AssertionError: AssertionError()" in warning.getMessage()
    dead = store.get(job.id)
    assert dead is not None and dead.last_error is not None
    assert dead.last_error.message == "AssertionError()", "the record says more than ''"


def test_a_line_break_in_an_error_message_cannot_forge_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forged = "kaboom\n2026-01-01 00:00:00,000 INFO conveyor.worker: all good"

    def hostile(args: Any) -> None:
        raise RuntimeError(forged)

    worker, queue, _, _ = _worker({"work": hostile})
    queue.enqueue(make_job(max_retries=0))
    caplog.set_level(logging.WARNING, logger="conveyor.worker")
    worker.drain()
    lines = [r.getMessage() for r in _records(caplog, logging.WARNING)]
    lines += [r.getMessage() for r in _records(caplog, logging.ERROR)]
    assert len(lines) == 2
    for line in lines:
        assert "\n" not in line and "kaboom\\n2026-01-01" in line, line


def test_a_returned_failure_warns_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    worker, queue, _, _ = _worker({"work": lambda args: Failure("quota exceeded")})
    queue.enqueue(make_job(max_retries=1))
    with caplog.at_level(logging.WARNING):
        worker.drain()
    [warning] = _records(caplog, logging.WARNING)
    assert "failure: quota exceeded" in warning.getMessage()
    assert not warning.exc_info


def test_a_missing_handler_dead_letter_is_an_error_without_a_failed_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policies = Policies(requeue=RequeuePolicy(requeue_delay_ms=10, max_requeue_age_ms=0))
    worker, queue, store, _ = _worker({"other": lambda a: None}, policies)
    job = make_job("unknown", args={"token": CANARY})
    queue.enqueue(job)
    with caplog.at_level(logging.DEBUG):
        worker.drain()
    assert store.list_dead()[0].id == job.id
    assert not [r for r in _records(caplog, logging.WARNING) if "failed" in r.getMessage()]
    [error] = _records(caplog, logging.ERROR)
    assert str(job.id) in error.getMessage() and "no-handler" in error.getMessage()
    assert CANARY not in caplog.text


def test_a_job_requeued_for_want_of_a_handler_is_one_warning_per_job_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The worker said nothing until the job was dead-lettered, 5 minutes later.
    policies = Policies(requeue=RequeuePolicy(requeue_delay_ms=10))
    worker, queue, _, clock = _worker({"other": lambda a: None}, policies)
    first, second = make_job("unknown"), make_job("unknown")
    queue.enqueue(first)
    queue.enqueue(second)
    with caplog.at_level(logging.DEBUG):
        worker.drain()
        clock.advance(timedelta(seconds=1))
        worker.drain()
    told = [r.getMessage() for r in _records(caplog, logging.WARNING)]
    assert len(told) == 1, told
    assert f"job {first.id} (unknown): no handler for job type 'unknown' in this worker" in told[0]
    assert "requeue.max_requeue_age_ms" in told[0]


class _Tenants:
    """A tenancy whose resolver knows no tenant, or fails."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def resolve(self, tenant_id: str) -> None:
        if self.fail:
            raise OSError("tenant directory unreachable")
        return None


def test_tenant_errors_are_heard(caplog: pytest.LogCaptureFixture) -> None:
    worker, queue, _, _ = _worker({"work": lambda a: None}, tenancy=_Tenants())
    gone = make_job(tenant_id="acme")
    queue.enqueue(gone)
    with caplog.at_level(logging.WARNING):
        worker.drain()
    [error] = _records(caplog, logging.ERROR)
    assert str(gone.id) in error.getMessage() and "tenant-not-found" in error.getMessage()

    caplog.clear()
    worker, queue, _, _ = _worker({"work": lambda a: None}, tenancy=_Tenants(fail=True))
    queue.enqueue(make_job(tenant_id="acme"))
    with caplog.at_level(logging.WARNING):
        worker.drain()
    [warning] = _records(caplog, logging.WARNING)
    assert "tenant-resolver-error" in warning.getMessage()
    assert isinstance(warning.exc_info[1], OSError)  # type: ignore[index]


def test_a_lease_expired_dead_letter_is_an_error(caplog: pytest.LogCaptureFixture) -> None:
    policies = Policies(lease=LeasePolicy(lease_ms=1000, max_reclaims=1))
    worker, queue, store, clock = _worker({"work": lambda a: None}, policies)
    job = make_job(args={"token": CANARY}, max_retries=1)
    queue.enqueue(job)
    with caplog.at_level(logging.DEBUG):
        for _ in range(2):  # the job kills its worker every time
            assert queue.dequeue("default", clock.now()) is not None
            clock.advance(1001)
            worker.reclaim_abandoned(clock.now())
    assert store.list_dead()[0].id == job.id
    [error] = _records(caplog, logging.ERROR)
    assert str(job.id) in error.getMessage() and "lease-expired" in error.getMessage()
    assert CANARY not in caplog.text


def test_an_undecodable_payload_is_one_error_after_its_dead_letter_is_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from backends import make_backend

    b = make_backend("sqlite")
    try:
        worker = Worker(b.queue, b.store, Registry({"work": lambda a: None}), clock=ManualClock(T0))
        poisoned = make_job()
        b.queue.enqueue(poisoned)
        assert b.corrupt is not None
        b.corrupt(poisoned, '{"not": "a job", "token": "' + CANARY + '"}')
        with caplog.at_level(logging.DEBUG):
            worker.drain()
        [error] = _records(caplog, logging.ERROR)
        assert str(poisoned.id) in error.getMessage() and "decode-error" in error.getMessage()
        assert CANARY not in caplog.text
    finally:
        b.cleanup()


def test_a_prefetched_batch_warns_and_errors_for_its_dead_letters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from backends import make_backend

    b = make_backend("sqlite")
    try:
        worker = Worker(
            b.queue,
            b.store,
            Registry({"ok": lambda a: 1, "bad": upstream_down}),
            clock=ManualClock(T0),
            prefetch=4,
        )
        jobs = [make_job("bad" if i % 2 else "ok", max_retries=0) for i in range(4)]
        for job in jobs:
            b.queue.enqueue(job)
        with caplog.at_level(logging.WARNING):
            assert worker.drain() == 4
        bad = {str(j.id) for j in jobs if j.job_type == "bad"}
        warned = {getattr(r, "job_id", None) for r in _records(caplog, logging.WARNING)}
        errored = {getattr(r, "job_id", None) for r in _records(caplog, logging.ERROR)}
        assert warned == bad and errored == bad
        assert len(_records(caplog, logging.WARNING)) == 2
    finally:
        b.cleanup()


# ---- the JSON format --------------------------------------------------------


def _record(**kw: Any) -> logging.LogRecord:
    try:
        raise ValueError("the failure")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "conveyor.worker", logging.WARNING, __file__, 1, "job %s failed", ("J1",), exc_info
    )
    for key, value in kw.items():
        setattr(record, key, value)
    return record


def test_the_json_formatter_writes_one_object_per_line_with_the_traceback_as_a_string() -> None:
    line = JsonFormatter().format(_record(job_id="J1", job_type="work", attempt=2))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "WARNING" and entry["logger"] == "conveyor.worker"
    assert entry["message"] == "job J1 failed"
    assert entry["time"].startswith("20") and entry["time"].endswith("+00:00")
    assert isinstance(entry["exc_info"], str) and "ValueError: the failure" in entry["exc_info"]
    assert entry["job_id"] == "J1" and entry["job_type"] == "work" and entry["attempt"] == 2


def test_a_copy_under_processes_names_itself_in_each_json_line() -> None:
    assert json.loads(JsonFormatter(process_index="1").format(_record()))["process"] == "1"
    assert "process" not in json.loads(JsonFormatter().format(_record()))


def test_the_json_formatter_keeps_what_the_redacting_filter_masked() -> None:
    record = _record()
    record.msg, record.args = "connecting to postgresql://u:hunter2@db/jobs", None
    RedactingFilter({"hunter2"}).filter(record)
    assert "hunter2" not in JsonFormatter().format(record)


def test_the_cli_worker_logs_failures_as_json_lines(tmp_path: Path) -> None:
    (tmp_path / "json_handlers.py").write_text(
        "def explode(args):\n    raise RuntimeError('the upstream refused')\n"
        "HANDLERS = {'explode': explode}\n"
    )
    (tmp_path / "conveyor.toml").write_text(
        f'provider = "db"\nurl = "sqlite:///{tmp_path / "jobs.db"}"\n'
        'handlers = ["json_handlers:HANDLERS"]\nentry_points = false\n'
        '[workers]\ncount = 1\nqueues = ["default"]\npoll_interval_ms = 20\n'
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("CONVEYOR_URL", None)
    cli = [sys.executable, "-m", "conveyor.shell.cli"]
    enqueue = [*cli, "enqueue", "explode", json.dumps({"token": CANARY}), "--max-retries", "0"]
    subprocess.run(enqueue, cwd=tmp_path, env=env, check=True, capture_output=True, timeout=60)
    worker = subprocess.Popen(
        [*cli, "--log-format", "json", "worker"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = subprocess.run(
                [*cli, "status", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True
            )
            if status.returncode == 0 and any(
                q["dead"] for q in json.loads(status.stdout)["queues"]
            ):
                break
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    entries = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    warnings = [e for e in entries if e["logger"] == "conveyor.worker" and e["level"] == "WARNING"]
    errors = [e for e in entries if e["logger"] == "conveyor.worker" and e["level"] == "ERROR"]
    assert len(warnings) == 1 and len(errors) == 1, stderr
    assert "RuntimeError: the upstream refused" in warnings[0]["message"]
    assert "Traceback" in warnings[0]["exc_info"] and "explode" in warnings[0]["exc_info"]
    assert set(warnings[0]) >= {"time", "level", "logger", "message", "job_id", "job_type"}
    assert CANARY not in stderr


def reply_too_long(args: Any) -> None:
    raise ValueError("the upstream replied: " + "<html>" * 3000)


@pytest.mark.parametrize("returned", [False, True], ids=["raised", "returned-failure"])
def test_a_huge_error_message_is_recorded_cut_behind_a_marker_with_its_frames_kept(
    returned: bool,
) -> None:
    def handler(args: Any) -> Any:
        if returned:
            try:
                reply_too_long(args)
            except ValueError as exc:
                return Failure(exc)
        reply_too_long(args)

    worker, queue, store, _ = _worker({"work": handler})
    job = make_job(max_retries=0)
    queue.enqueue(job)
    worker.drain()
    error = store.get(job.id).last_error
    assert error.message.startswith("the upstream replied: <html>")
    assert len(error.message) <= 2000 and error.message.endswith(" more characters cut]")
    trace = error.traceback
    assert trace is not None and len(trace) <= 4000
    assert "in reply_too_long" in trace, "the raising frame is kept"
    assert "more characters of this message cut ...]" in trace


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_record_a_loggers_own_terminal_handler_wrote_is_not_written_again(
    tmp_path: Path, log_format: str
) -> None:
    # Under `manage.py conveyor worker` with DEBUG = True, Django's console handler on
    # the `django` logger wrote each task's line, and the CLI's root handler again.
    (tmp_path / "own_logging.py").write_text(
        "import logging, sys\n"
        "mine = logging.StreamHandler(sys.stderr)\n"
        "mine.setFormatter(logging.Formatter('MINE %(name)s %(message)s'))\n"
        "logging.getLogger('app').addHandler(mine)\n"
        "logging.getLogger('app.jobs').warning('loaded once')\n"
        "try:\n    raise ValueError('x' * 1_000_000)\n"
        "except ValueError:\n    logging.getLogger('other').exception('a huge one')\n"
        "logging.getLogger('other').warning('only the root handler writes this')\n"
        "HANDLERS = {'noop': lambda args: None}\n"
    )
    (tmp_path / "conveyor.toml").write_text(
        f'provider = "db"\nurl = "sqlite:///{tmp_path / "jobs.db"}"\n'
        'handlers = ["own_logging:HANDLERS"]\nentry_points = false\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}"
    err = tmp_path / "stderr.txt"
    with err.open("w") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "conveyor.shell.cli", "--log-format", log_format, "worker"],
            cwd=tmp_path,
            env=env,
            stderr=sink,
        )
        try:
            deadline = time.monotonic() + 60
            while "only the root handler" not in err.read_text():
                assert time.monotonic() < deadline and worker.poll() is None, err.read_text()
                time.sleep(0.05)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
    written = err.read_text()
    assert "MINE app.jobs loaded once" in written
    # A JSON log keeps every record, as JSON, whoever else wrote it.
    assert written.count("loaded once") == (1 if log_format == "text" else 2), written
    assert written.count("only the root handler writes this") == 1, written
    # A handler's exception message of a megabyte is cut in the log's traceback.
    assert "ValueError: xxx" in written and "characters of this message cut" in written
    assert len(written) < LOG_TRACEBACK_CHARS + 10_000


def test_a_traceback_in_the_cli_log_keeps_its_frames_and_cuts_a_huge_message() -> None:
    def fail() -> None:
        raise ValueError("x" * 1_000_000)

    try:
        fail()
    except ValueError as exc:
        record = logging.LogRecord("app", logging.ERROR, __file__, 1, "failed", None, None)
        record.exc_info = (type(exc), exc, exc.__traceback__)
    assert CappedTraceback().filter(record)
    for formatter in (logging.Formatter(), JsonFormatter()):
        line = formatter.format(record)
        assert len(line) <= LOG_TRACEBACK_CHARS + 200
        assert "in fail" in line and "characters of this message cut" in line
