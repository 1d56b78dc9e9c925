"""Secrets: a canary string in job args never reaches logs (captured at DEBUG, every
logger), exception messages, `repr(job)` or `conveyor dead ...` output, unless the
user opts in (`Job.reveal()`, `conveyor dead show --show-args`)."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from conveyor.core import JobStatus, ValidationError, WriteRetryPolicy, create_job
from conveyor.shell.config import load_config
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import build
from conveyor.shell.worker.loop import Worker
from fault_harness import HERE, Site, cli_config
from fault_worker import JOB_TYPE, policies

pytestmark = pytest.mark.timeout(60)

CANARY = "canary-7f3a9c-do-not-log"


def debug_everything(caplog: pytest.LogCaptureFixture) -> None:
    """DEBUG on the root (what `conveyor --log-level DEBUG` sets), psycopg and redis,
    and SQLAlchemy's statement echo (`sqlalchemy.engine` at INFO, which SQLAlchemy
    itself leaves at WARN). Not `sqlalchemy.engine` at DEBUG: that is SQLAlchemy's
    row dump, which prints every fetched row, payloads included, by design."""
    for name in (None, "psycopg", "redis"):
        caplog.set_level(logging.DEBUG, logger=name)
    caplog.set_level(logging.INFO, logger="sqlalchemy.engine")


def failing(args: Mapping[str, Any]) -> Any:
    raise RuntimeError("the upstream service refused the request")


def dead_letter_with_canary(site: Site) -> Any:
    """Enqueue a job carrying the canary whose handler fails, and run it to the dead
    letters (no retries) with a worker in this process."""
    job = create_job(
        id=uuid4(),
        job_type=JOB_TYPE,
        args={"api_key": CANARY, "nested": {"password": CANARY}},
        now=_now(),
        max_retries=0,
    ).unwrap()
    site.queue.enqueue(job)
    worker = Worker(site.queue, site.store, Registry({JOB_TYPE: failing}), policies=policies(1500))
    assert worker.drain() == 1
    return job


def _now() -> datetime:
    return datetime.now(UTC)


def test_a_failing_job_leaves_its_args_out_of_debug_logs_errors_and_repr(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    debug_everything(caplog)
    job = dead_letter_with_canary(site)
    dead = site.store.get(job.id)
    assert dead.status is JobStatus.FAILED and dead.last_error.type == "RuntimeError"

    if site.name != "redis":
        assert "SQL parameters hidden" in caplog.text, "statements were echoed, without values"
    assert CANARY not in caplog.text
    assert CANARY not in dead.last_error.message
    assert CANARY not in repr(dead) and CANARY not in repr(job)
    assert CANARY not in str([dead])
    assert CANARY in dead.reveal(), "revealing is the explicit opt-in"


def break_the_store(site: Site) -> Any:
    """Make every outcome write fail (a botched migration on SQL; a key of the wrong
    type on Redis); returns how to mend it."""
    if site.name == "redis":
        import redis

        client = redis.Redis.from_url(site.url)

        def occupy(job_id: Any) -> None:
            client.set(f"{{conveyor}}:store:{job_id}", "not a hash")

        return occupy, lambda job_id: client.delete(f"{{conveyor}}:store:{job_id}")
    import sqlalchemy as sa

    def rename(old: str, new: str) -> None:
        with site.queue.engine.begin() as conn:
            conn.execute(sa.text(f"ALTER TABLE {old} RENAME TO {new}"))

    return (
        lambda _: rename("conveyor_job_store", "conveyor_job_store_moved"),
        lambda _: rename("conveyor_job_store_moved", "conveyor_job_store"),
    )


def test_a_failing_outcome_write_logs_its_error_without_the_args(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    job = create_job(id=uuid4(), job_type=JOB_TYPE, args={"api_key": CANARY}, now=_now()).unwrap()
    site.queue.enqueue(job)
    breaking, mending = break_the_store(site)
    breaking(job.id)
    debug_everything(caplog)
    worker = Worker(site.queue, site.store, Registry({JOB_TYPE: lambda args: "done"}))
    worker.executor.retry = WriteRetryPolicy(initial_s=0.001)
    try:
        assert worker.drain() == 1
    finally:
        mending(job.id)
    assert site.counts().in_flight == 1, "left to its lease, never acked unwritten"
    assert re.search(r"leaving (it|them) to (its|their) lease", caplog.text), (
        "the failure itself is logged"
    )
    assert CANARY not in caplog.text


def test_rejected_args_are_not_echoed_in_the_validation_error() -> None:
    cases = [
        {"token": {CANARY}},  # a set: not JSON
        {"token": CANARY, "bytes": CANARY.encode()},
        {"token": CANARY * 5000},  # over the size limit
        {"token": CANARY, "nan": float("nan")},
    ]
    for args in cases:
        result = create_job(id=uuid4(), job_type=JOB_TYPE, args=args, now=_now())
        error = result.failure()
        assert isinstance(error, ValidationError) and error.fields == ("args",)
        assert CANARY not in str(error) and CANARY not in repr(error), str(error)


def conveyor(site: Site, *args: str) -> subprocess.CompletedProcess[str]:
    config = site.folder / "conveyor.toml"
    config.write_text(cli_config(site))
    cli = [sys.executable, "-m", "conveyor.shell.cli", "--config", str(config)]
    return subprocess.run(
        [*cli, "--log-level", "DEBUG", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PYTHONPATH": str(HERE), "CONVEYOR_FAULT_LEDGER": str(site.ledger.path)},
    )


def test_conveyor_dead_list_and_show_do_not_print_args_unless_asked(site: Site) -> None:
    job = dead_letter_with_canary(site)
    for command in (("dead", "list"), ("dead", "list", "--json"), ("dead", "show", str(job.id))):
        out = conveyor(site, *command)
        assert out.returncode == 0, out.stderr
        assert str(job.id) in out.stdout
        assert CANARY not in out.stdout and CANARY not in out.stderr, command
    shown = conveyor(site, "dead", "show", str(job.id), "--show-args")
    assert json.loads(shown.stdout)["args"]["api_key"] == CANARY


# ---- passwords in URLs ----------------------------------------------------------------
#
# A password holding an unencoded '#', '/', '?' or '@' is split by the URL parsers,
# and the drivers quote the pieces back ("Port could not be cast to integer value as
# 's3cr'", "failed to resolve host 'et-Zq9@127.0.0.1'"): no piece may show anywhere.

PASSWORDS = {
    "hash": "s3cr#et-Zq9",
    "slash": "s3cr/et-Zq9",
    "at": "s3cr@et-Zq9",
    "query": "s3cr?et-Zq9",
    "clean": "s3cr3t-Zq9",
    "all": "Xk7#Wm3/Pv5@Rt8",
}


def pieces(password: str) -> list[str]:
    return [password, *(p for p in re.split(r"[#/?@]", password) if len(p) >= 3)]


def assert_hidden(password: str, text: str) -> None:
    for piece in pieces(password):
        assert piece not in text, f"{piece!r} of the password shows in:\n{text}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def url_for(provider: str, password: str) -> str:
    port = closed_port()
    if provider == "redis":
        return f"redis://default:{password}@127.0.0.1:{port}/0"
    return f"postgresql+psycopg://conveyor:{password}@127.0.0.1:{port}/jobs"


def backend_config(provider: str, url: str) -> dict[str, Any]:
    # No start-up wait: the server never comes, and the error is what is checked.
    if provider == "redis":
        return {
            "provider": "redis",
            "redis": {"url": url},
            "entry_points": False,
            "startup_timeout_ms": 0,
        }
    return {"provider": "db", "url": url, "entry_points": False, "startup_timeout_ms": 0}


@pytest.mark.parametrize("password", PASSWORDS.values(), ids=PASSWORDS.keys())
def test_the_config_repr_hides_url_passwords_and_keeps_the_host(password: str) -> None:
    pg, rd = url_for("db", password), url_for("redis", password)
    config = load_config(
        {"provider": "memory", "url": pg, "redis": {"url": rd}, "tenancy": {"url": pg}},
        env={},
    )
    runtime = build(config)
    for text in (repr(config), str(config), repr(runtime.config), repr(config.tenancy)):
        assert_hidden(password, text)
        assert "127.0.0.1" in text and "***" in text


@pytest.mark.parametrize("password", PASSWORDS.values(), ids=PASSWORDS.keys())
@pytest.mark.parametrize("provider", ["db", "redis"], ids=["postgresql", "redis"])
def test_an_unreachable_backend_fails_without_showing_its_password(
    provider: str, password: str, caplog: pytest.LogCaptureFixture
) -> None:
    debug_everything(caplog)
    url = url_for(provider, password)
    error: BaseException
    try:
        runtime = build(backend_config(provider, url))
    except Exception as exc:
        error = exc
        # One line naming the setting to fix; an outage says which server it waited for.
        key = "redis.url" if provider == "redis" else "url"
        assert "\n" not in str(exc) and key in str(exc), str(exc)
    else:
        # Redis connects on the first command, whose error holds the address only.
        runtime.queue.retry_budget_s = runtime.store.retry_budget_s = 0
        with pytest.raises(Exception) as info:
            runtime.status()
        error = info.value
    text = "".join(traceback.format_exception(error))
    assert_hidden(password, text)
    assert_hidden(password, repr(error))
    assert_hidden(password, caplog.text)


@pytest.mark.parametrize("password", PASSWORDS.values(), ids=PASSWORDS.keys())
@pytest.mark.parametrize("provider", ["db", "redis"], ids=["postgresql", "redis"])
def test_the_cli_on_an_unreachable_backend_prints_one_line_without_the_password(
    provider: str, password: str, tmp_path: Path
) -> None:
    url = url_for(provider, password)
    # A 2 s lease gives Redis a 0.5 s retry budget for the refused connection (the
    # default 60 s lease, 15 s): what is checked is the error, not how long it took.
    (tmp_path / "conveyor.toml").write_text(
        f'provider = "{provider}"\nentry_points = false\nlease_ms = 2000\n'
    )
    variable = "CONVEYOR_REDIS_URL" if provider == "redis" else "CONVEYOR_URL"
    out = subprocess.run(
        [sys.executable, "-m", "conveyor.shell.cli", "--log-level", "DEBUG", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, variable: url},
    )
    assert out.returncode in (1, 2), out
    assert_hidden(password, out.stdout + out.stderr)
    # Log lines come first (DEBUG here); the error itself is one line, the last.
    errors = [line for line in out.stderr.splitlines() if line.startswith("conveyor: ")]
    assert errors == [out.stderr.strip().splitlines()[-1]], out.stderr
