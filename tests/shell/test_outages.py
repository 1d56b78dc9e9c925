"""Server outages: one line when the server goes, one when it is back, never a flood.

Each test starts a PostgreSQL or Redis server of its own, so stopping it harms no
other test. A worker rides out an outage with one WARNING and one INFO and then
works again; a worker started while the server is down waits for it; one whose
server never comes up, and any command run while it is down, says so in one line
with the fix.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor.core import Policies, Succeeded, decide, start
from conveyor.shell.ports import Claim
from conveyor.testing.redis_server import RedisServer, _free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from fault_pg import PgCluster

pytestmark = pytest.mark.timeout(120)

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]
#: A short lease keeps the adapters' own retry budget (a quarter lease) well under the
#: outage, so the outage reaches the worker loop instead of being absorbed below it.
LEASE_MS = 2000
OUTAGE_S = 3.0


class Server:
    """A server of this test's own that it may stop and start: `url`, `down()`, `up()`."""

    def __init__(self, url: str, down: Callable[[], None], up: Callable[[], None]) -> None:
        self.url, self.down, self.up = url, down, up


@pytest.fixture(params=["redis", "postgresql"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param == "redis":
        redis = RedisServer().start()
        yield Server(redis.url, redis.kill, redis.start)
        redis.cleanup()
    else:
        cluster = PgCluster().start()
        yield Server(cluster.url, cluster.crash, cluster.start)
        cluster.cleanup()


def config(url: str, **extra: Any) -> dict[str, Any]:
    backend: dict[str, Any] = (
        {"provider": "redis", "redis": {"url": url}}
        if url.startswith("redis")
        else {"provider": "db", "url": url, "pool_size": 4, "auto_migrate": True}
    )
    return {
        **backend,
        "entry_points": False,
        "lease_ms": LEASE_MS,
        "workers": {"count": 2, "poll_interval_ms": 50},
        # Pruning runs once a minute, at a random moment, and reports its own failures.
        "retention": {"prune_interval_ms": 0},
        **extra,
    }


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def conveyor_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("conveyor")]


def test_an_outcome_write_cut_off_by_an_outage_is_one_warning_without_a_traceback(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """The server dies between a handler's return and its outcome write: the write is
    left to the lease as usual, in a line without a traceback (the worker's loop
    reports the outage itself, once: see the test below)."""
    runtime = conveyor.build(config(server.url, workers={"count": 0}))
    job = runtime.enqueue("note", {"n": 1})
    now = runtime.clock.now()
    claims = [runtime.queue.dequeue("default", now)]
    assert isinstance(claims[0], Claim)
    running = start(claims[0].job, now).unwrap()
    decision = decide(running, Succeeded(None), now, Policies(), 0.5)
    server.down()
    try:
        with caplog.at_level(logging.INFO, logger="conveyor"):
            assert runtime.executor.finish_many([(claims[0], decision)]) == [False]
            assert runtime.executor.carry_out(claims[0], decision) is False
    finally:
        server.up()
    records = conveyor_records(caplog)
    lines = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in records)
    assert not [r for r in records if r.exc_info or r.exc_text], f"a traceback:\n{lines}"
    assert not [r for r in records if r.levelno >= logging.WARNING], lines
    left = [r.getMessage() for r in records if r.name == "conveyor.executor"]
    assert len(left) == 2 and all("server is away or full" in m for m in left), lines
    assert str(job.id) in left[1]
    runtime.close()


def test_a_worker_rides_out_a_server_outage_with_one_warning_and_one_info(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    done: list[int] = []
    runtime = conveyor.build(config(server.url), handlers={"note": lambda a: done.append(a["n"])})
    with caplog.at_level(logging.INFO, logger="conveyor"), runtime:
        runtime.enqueue("note", {"n": 1})
        wait_for(lambda: done == [1], 10, "the first job")
        caplog.clear()

        server.down()
        time.sleep(OUTAGE_S)
        server.up()

        def second_job_ran() -> bool:
            try:
                if 2 not in done and not getattr(second_job_ran, "sent", False):
                    runtime.enqueue("note", {"n": 2})
                    second_job_ran.sent = True  # type: ignore[attr-defined]
            except Exception:
                return False  # the server is still coming back
            return 2 in done

        wait_for(second_job_ran, 20, "a job enqueued after the restart")
        time.sleep(0.5)  # anything the workers still had to say
        records = conveyor_records(caplog)
        assert all(t.is_alive() for pool in runtime.pools for t in pool._threads)

    lines = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in records)
    assert not [r for r in records if r.exc_info or r.exc_text], f"a traceback was logged:\n{lines}"
    warnings = [r for r in records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, lines
    assert "unreachable" in warnings[0].getMessage()
    assert ("Redis" if server.url.startswith("redis") else "PostgreSQL") in lines
    back = [r for r in records if r.levelno == logging.INFO and "is back" in r.getMessage()]
    assert len(back) == 1, lines
    assert len(records) <= 4, lines


def test_an_idle_worker_looks_for_work_soon_after_an_outage_not_a_poll_interval_later(
    server: Server,
) -> None:
    # The wait for work failed with the server, and the worker then slept the rest of
    # its poll interval: 30 s here before a job enqueued just after the outage ran.
    done: list[float] = []
    settings = config(server.url, workers={"count": 1, "poll_interval_ms": 30_000})
    runtime = conveyor.build(settings, handlers={"note": lambda a: done.append(time.monotonic())})
    with runtime:
        time.sleep(1.0)  # idle, in its wait for work
        server.down()
        time.sleep(OUTAGE_S)
        server.up()
        wait_for(lambda: _enqueued(runtime), 20, "the server to take an enqueue")
        sent = time.monotonic()
        wait_for(lambda: bool(done), 25, "the job enqueued after the outage")
    assert done[0] - sent < 12, f"picked up {done[0] - sent:.1f} s after its enqueue"


def test_a_round_whose_outcome_write_met_the_outage_does_not_say_the_server_is_back(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    # The handler returned during the outage; its outcome's write was left to the lease
    # without raising, and the round ending "normally" was taken for the server's
    # return: "is back" was logged while it was still away.
    started = threading.Event()

    def nap(args: Any) -> None:
        started.set()
        time.sleep(1.5)

    settings = config(server.url, workers={"count": 1, "poll_interval_ms": 50})
    runtime = conveyor.build(settings, handlers={"nap": nap})
    with caplog.at_level(logging.INFO, logger="conveyor"), runtime:
        runtime.enqueue("nap", {})
        assert started.wait(10)
        server.down()
        time.sleep(5.0)  # the handler ends 1.5 s in; its write fails; rounds go on
        said = [r.getMessage() for r in conveyor_records(caplog)]
        server.up()
        wait_for(
            lambda: any("is back after" in r.getMessage() for r in conveyor_records(caplog)),
            30,
            "the worker to see the server back",
        )
    assert any("unreachable" in m for m in said), said
    assert not [m for m in said if "is back after" in m], said


@pytest.mark.parametrize("wait", ["result", "aresult"])
def test_a_wait_for_a_result_rides_out_an_outage_within_its_timeout(
    server: Server, wait: str
) -> None:
    # A read of the job failing with the server ended the wait with the driver's own
    # ConnectionError / OperationalError, though the job then finished in time.
    settings = config(server.url, workers={"count": 1, "poll_interval_ms": 50})
    runtime = conveyor.build(settings, handlers={"add": lambda a: a["x"] + 1})
    with runtime:
        job = runtime.enqueue("add", {"x": 41}, delay=OUTAGE_S + 2)

        def outage() -> None:
            time.sleep(0.5)
            server.down()
            time.sleep(OUTAGE_S)
            server.up()

        cut = threading.Thread(target=outage)
        cut.start()
        try:
            if wait == "result":
                got = runtime.result(job.id, timeout=40)
            else:
                import asyncio

                got = asyncio.run(runtime.aresult(job.id, timeout=40))
        finally:
            cut.join()
    assert got == 42


def test_a_wait_that_never_reached_the_server_ends_at_its_timeout_with_the_outage(
    server: Server,
) -> None:
    runtime = conveyor.build(config(server.url, workers={"count": 0}))
    job = runtime.enqueue("add", {"x": 1})
    server.down()
    try:
        began = time.monotonic()
        with pytest.raises(Exception) as failed:
            runtime.result(job.id, timeout=2)
        assert time.monotonic() - began >= 1.5, "waited out its timeout"
        from conveyor.shell.outage import is_outage

        assert is_outage(failed.value), repr(failed.value)
    finally:
        server.up()
        runtime.close()


def test_a_wait_ends_at_its_own_timeout_not_the_stores_retry_budget(server: Server) -> None:
    # With the default lease each read of the wait sat in the store's own retry for a
    # quarter lease (15 s): result(timeout=2) returned after 15 s, and a wait begun
    # before the outage with timeout=6 after 16 s.
    runtime = conveyor.build({**config(server.url, workers={"count": 0}), "lease_ms": 60_000})
    job = runtime.enqueue("add", {"x": 1})
    took: dict[str, float] = {}

    def wait(name: str, timeout: float) -> None:
        began = time.monotonic()
        with contextlib.suppress(Exception):
            runtime.result(job.id, timeout=timeout)
        took[name] = time.monotonic() - began

    early = threading.Thread(target=wait, args=("begun before", 6.0))
    early.start()
    time.sleep(0.5)
    server.down()
    try:
        wait("begun during", 2.0)
        early.join(30)
    finally:
        server.up()
        runtime.close()
    assert took["begun during"] < 2.0 + 3.0, took
    assert took["begun before"] < 6.0 + 3.0, took


def _enqueued(runtime: Any) -> bool:
    try:
        runtime.enqueue("note", {})
    except Exception:
        return False  # the server is still coming back
    return True


def test_a_worker_started_during_an_outage_waits_for_the_server(server: Server) -> None:
    server.down()
    done: list[int] = []
    started: list[Any] = []
    failed: list[BaseException] = []

    def start() -> None:
        try:
            runtime = conveyor.build(
                config(server.url, startup_timeout_ms=30_000),
                handlers={"note": lambda a: done.append(a["n"])},
            )
            started.append(runtime.start())
        except BaseException as exc:
            failed.append(exc)

    starter = threading.Thread(target=start)
    starter.start()
    time.sleep(2.0)
    assert not failed, f"the worker gave up while the server was down: {failed[0]!r}"
    assert starter.is_alive(), "the worker started without a server"
    server.up()
    starter.join(30)
    assert not failed and started, failed
    runtime = started[0]
    try:
        runtime.enqueue("note", {"n": 1})
        wait_for(lambda: done == [1], 15, "the job")
    finally:
        runtime.stop(5)
        runtime.close()


def unreachable_url(kind: str, tmp_path: Path) -> str:
    if kind == "redis":
        return f"redis://:s3cret@127.0.0.1:{_free_port()}/0"
    return f"postgresql+psycopg://postgres:s3cret@/postgres?host={tmp_path / 'no-server'}"


def write_config(tmp_path: Path, url: str) -> Path:
    backend = (
        f'provider = "redis"\n[redis]\nurl = "{url}"\n'
        if url.startswith("redis")
        else f'provider = "db"\nurl = "{url}"\n'
    )
    path = tmp_path / "conveyor.toml"
    path.write_text(f"lease_ms = {LEASE_MS}\nentry_points = false\n{backend}")
    return path


def run_cli(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    began = time.monotonic()
    result = subprocess.run(
        [*CONVEYOR, "--config", str(tmp_path / "conveyor.toml"), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    return result, time.monotonic() - began


@pytest.mark.parametrize("kind", ["redis", "postgresql"])
def test_conveyor_worker_gives_up_after_the_startup_timeout_in_one_line(
    kind: str, tmp_path: Path
) -> None:
    write_config(tmp_path, unreachable_url(kind, tmp_path))
    result, took = run_cli(tmp_path, "worker", "--startup-timeout", "1.5")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "s3cret" not in result.stderr
    assert took >= 1.5, "it waited for the server first"
    assert lines[-1].startswith("conveyor: "), result.stderr
    assert "startup" in lines[-1] and ("url" in lines[-1]), lines[-1]
    assert len(lines) <= 4, result.stderr


@pytest.mark.parametrize(
    "command", [["status"], ["enqueue", "note"], ["worker", "--startup-timeout", "0"]]
)
@pytest.mark.parametrize("kind", ["redis", "postgresql"])
def test_with_the_default_lease_a_down_server_is_told_at_once_not_after_the_retry_budget(
    kind: str, command: list[str], tmp_path: Path
) -> None:
    # On Redis the build did not reach the server, so the command's first call waited
    # out the write retry budget (a quarter of the 60 s lease): 15 s, whatever
    # --startup-timeout said, where PostgreSQL answered in under a second.
    write_config(tmp_path, unreachable_url(kind, tmp_path))
    config = tmp_path / "conveyor.toml"
    config.write_text(config.read_text().replace(f"lease_ms = {LEASE_MS}\n", ""))
    result, took = run_cli(tmp_path, *command)
    assert result.returncode == 1, result.stderr
    assert "unreachable" in result.stderr.strip().splitlines()[-1], result.stderr
    assert took < 8, f"took {took:.1f} s"


@pytest.mark.parametrize("command", [["status"], ["enqueue", "note"]])
@pytest.mark.parametrize("kind", ["redis", "postgresql"])
def test_a_command_against_a_down_server_fails_in_one_line_with_the_fix(
    kind: str, command: list[str], tmp_path: Path
) -> None:
    write_config(tmp_path, unreachable_url(kind, tmp_path))
    result, _ = run_cli(tmp_path, *command)
    assert result.returncode == 1, result.stderr
    assert "s3cret" not in result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    # At most one line before the error: the Redis client's settings check, made at
    # build, says it could not read them.
    lines = result.stderr.strip().splitlines()
    assert len(lines) <= 2, result.stderr
    assert lines[-1].startswith("conveyor: ") and "unreachable" in lines[-1], lines[-1]
    assert "url" in lines[-1], "it names the config key to check"


def test_an_unexpected_error_in_the_worker_loop_is_logged_once_with_its_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = conveyor.build(
        {
            "provider": "db",
            "url": f"sqlite:///{tmp_path / 'jobs.db'}",
            "entry_points": False,
            "workers": {"count": 1, "poll_interval_ms": 10},
        },
        handlers={"note": lambda a: None},
    )

    def broken(*_: object, **__: object) -> None:
        raise KeyError("a bug, not an outage")

    with caplog.at_level(logging.INFO, logger="conveyor"), runtime:
        monkeypatch.setattr(runtime.queue, "dequeue", broken)
        time.sleep(1.0)
        assert all(t.is_alive() for pool in runtime.pools for t in pool._threads)
    errors = [r for r in conveyor_records(caplog) if r.levelno >= logging.WARNING]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert errors[0].exc_info is not None, "a bug keeps its traceback"


def test_migrate_against_a_down_server_says_unreachable_as_every_command_does(
    tmp_path: Path,
) -> None:
    # It said "url: could not use ...: OperationalError: ..." where the other commands
    # say the server is unreachable and what to do.
    write_config(tmp_path, unreachable_url("postgresql", tmp_path))
    result, _ = run_cli(tmp_path, "migrate")
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("conveyor: PostgreSQL at ") and "is unreachable" in last, last
    assert "start the server, or fix `url`" in last and "s3cret" not in last, last
