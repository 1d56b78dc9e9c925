"""The attempt history, end to end on every backend: what each attempt did, on which
worker, with which error and traceback, as `Runtime.get`, the store and
`conveyor job show` / `conveyor dead show` report it."""

from __future__ import annotations

import json
from typing import Any

import conveyor
import pytest
from backends import Backend
from cli_support import cli, cli_project
from conveyor.core import AttemptOutcome, JobStatus, LeasePolicy, Policies, RetryPolicy
from conveyor.shell.config import load_config
from conveyor.shell.job_text import describe
from conveyor.shell.ports import Claim
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job

#: The CLI tests' project (a config and handlers) on SQLite and Redis, and its commands
#: called in-process.
__all__ = ["cli", "cli_project"]

WORKER_ID = "attempts-test-worker"
LEASE_MS = 30_000
POLICIES = Policies(
    retry=RetryPolicy(initial_delay_ms=100, max_delay_ms=1000, jitter=False),
    lease=LeasePolicy(lease_ms=LEASE_MS),
)
#: The source line that raises in `fails_once`; its traceback must show it.
RAISING_LINE = 'raise ConnectionError("upstream down on the first try")'


def always_fails(args: Any) -> None:
    raise ValueError("never works")


class Setup:
    """A worker and a runtime over one backend, on a manual clock at T0."""

    def __init__(self, backend: Backend) -> None:
        self.clock = ManualClock(T0)
        self.calls = 0
        registry = Registry()
        registry.register("flaky", self.fails_once)
        registry.register("doomed", always_fails)
        registry.register("fine", lambda args: "ok")
        self.queue, self.store = backend.queue, backend.store
        self.worker = Worker(
            backend.queue,
            backend.store,
            registry,
            clock=self.clock,
            policies=POLICIES,
            jitter=lambda: 0.5,
            worker_id=WORKER_ID,
            clock_check=False,
        )
        config = load_config({"provider": "memory", "lease_ms": LEASE_MS}, env={})
        self.runtime = Runtime(
            config,
            backend.queue,
            backend.store,
            registry,
            clock=self.clock,
            jitter=lambda: 0.5,
        )

    def fails_once(self, args: Any) -> str:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("upstream down on the first try")
        return "ok"

    def run_until_done(self, rounds: int = 5) -> None:
        for _ in range(rounds):
            self.worker.drain()
            self.clock.advance(1000)


@pytest.fixture
def setup(backend: Backend) -> Setup:
    return Setup(backend)


def test_a_job_that_fails_once_then_succeeds_shows_both_attempts(setup: Setup) -> None:
    job = make_job(job_type="flaky")
    setup.queue.enqueue(job)
    setup.run_until_done()
    view = setup.runtime.get(job.id)
    assert view is not None and view.state is JobStatus.COMPLETED
    first, second = view.attempts
    assert (first.number, first.outcome, first.worker) == (1, AttemptOutcome.RETRIED, WORKER_ID)
    assert (second.number, second.outcome, second.worker) == (
        2,
        AttemptOutcome.COMPLETED,
        WORKER_ID,
    )
    assert first.started_at is not None and first.started_at <= first.finished_at
    assert second.error is None


def test_a_failed_attempt_keeps_the_traceback_of_the_raising_line(setup: Setup) -> None:
    job = make_job(job_type="flaky")
    setup.queue.enqueue(job)
    setup.run_until_done()
    recorded = setup.store.get(job.id)
    assert recorded is not None
    error = recorded.attempts[0].error
    assert error is not None and error.type == "ConnectionError"
    assert error.traceback is not None
    assert RAISING_LINE in error.traceback
    assert error.traceback.rstrip().endswith("ConnectionError: upstream down on the first try")


def test_a_job_waiting_for_its_retry_shows_the_failed_attempt(setup: Setup) -> None:
    job = make_job(job_type="flaky")
    setup.queue.enqueue(job)
    setup.worker.drain()
    view = setup.runtime.get(job.id)
    assert view is not None and view.state is JobStatus.RETRYING
    [attempt] = view.attempts
    assert attempt.outcome is AttemptOutcome.RETRIED and attempt.worker == WORKER_ID


def test_an_abandoned_attempt_is_recorded_as_reclaimed_with_no_worker(setup: Setup) -> None:
    job = make_job(job_type="fine")
    setup.queue.enqueue(job)
    vanished = setup.queue.dequeue("default", setup.clock.now())  # a worker that then died
    assert isinstance(vanished, Claim)
    setup.clock.advance(LEASE_MS + 1)
    setup.run_until_done()
    view = setup.runtime.get(job.id)
    assert view is not None and view.state is JobStatus.COMPLETED
    reclaimed, completed = view.attempts
    assert (reclaimed.outcome, reclaimed.worker, reclaimed.started_at) == (
        AttemptOutcome.RECLAIMED,
        None,
        None,
    )
    assert (completed.outcome, completed.worker) == (AttemptOutcome.COMPLETED, WORKER_ID)


def test_a_dead_letter_keeps_every_attempt_and_a_revive_keeps_them_too(setup: Setup) -> None:
    job = make_job(job_type="doomed", max_retries=1)
    setup.queue.enqueue(job)
    setup.run_until_done()
    [dead] = setup.store.list_dead()
    outcomes = [a.outcome for a in dead.attempts]
    assert outcomes == [AttemptOutcome.RETRIED, AttemptOutcome.DEAD_LETTERED]
    assert all(a.error is not None and a.error.traceback for a in dead.attempts)
    setup.runtime.retry_dead(job.id)
    view = setup.runtime.get(job.id)
    assert view is not None and view.state is JobStatus.PENDING
    assert view.attempts == dead.attempts


def test_job_show_lines_summarise_each_attempt_and_hide_tracebacks(setup: Setup) -> None:
    job = make_job(job_type="flaky")
    setup.queue.enqueue(job)
    setup.run_until_done()
    view = setup.runtime.get(job.id)
    assert view is not None
    text = "\n".join(describe(view))
    assert "#1 retried at" in text and f"worker {WORKER_ID}" in text
    assert "ConnectionError: upstream down on the first try" in text
    assert "#2 completed at" in text
    assert RAISING_LINE not in text and "--traceback" in text
    assert RAISING_LINE in "\n".join(describe(view, show_traceback=True))


# ---- the CLI, on SQLite and Redis ------------------------------------------------------


def test_job_show_and_dead_show_give_the_failing_attempts_traceback(
    cli_project, cli
) -> None:
    job_id = cli("enqueue", "explode", json.dumps({"card": "s3cr3t"})).stdout.strip()
    rt = conveyor.build(str(cli_project / "conveyor.toml"))
    try:
        rt.drain()
    finally:
        rt.close()
    raising = 'raise Permanent("cannot ship to the moon")'
    shown = json.loads(cli("job", "show", job_id, "--json").stdout)
    [attempt] = shown["attempts"]
    assert attempt["outcome"] == "dead_lettered" and attempt["worker"]
    assert raising in attempt["error"]["traceback"]
    text = cli("job", "show", job_id).stdout
    assert "#1 dead_lettered" in text and raising not in text
    assert raising in cli("job", "show", job_id, "--traceback").stdout
    dead = json.loads(cli("dead", "show", job_id).stdout)
    assert raising in dead["traceback"]
    assert [a["outcome"] for a in dead["attempts"]] == ["dead_lettered"]
    assert "s3cr3t" not in json.dumps(shown) + json.dumps(dead), "args stay out of tracebacks"
