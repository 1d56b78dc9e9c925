"""Cancelling a job that a worker process is running, across processes and a kill -9:
the job is recorded cancelled, never completed, and never runs again."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime

import pytest
from conveyor.core import CancelResult, JobStatus
from conveyor.shell.cancellation import cancel_job
from conveyor.shell.executor import Executor
from fault_harness import Site, wait_until

pytestmark = pytest.mark.timeout(90)


def _cancel(site: Site, job_id: object) -> CancelResult:
    executor = Executor(site.queue, site.store)
    return cancel_job(site.queue, site.store, executor, job_id, datetime.now(UTC))  # type: ignore[arg-type]


def _status(site: Site, job_id: object) -> JobStatus | None:
    record = site.store.get(job_id)
    return None if record is None else record.status


def test_a_job_cancelled_while_another_process_runs_it_is_recorded_cancelled(
    site: Site,
) -> None:
    [job] = site.produce(1, sleep_ms=1500)
    worker = site.spawn(threads=1)
    wait_until(lambda: site.counts().in_flight == 1, what="the job to be claimed")
    assert _cancel(site, job.id) is CancelResult.REQUESTED
    wait_until(lambda: _status(site, job.id) is not None, what="the outcome to be written")
    assert _status(site, job.id) is JobStatus.CANCELLED, "never recorded completed"
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert site.counts().in_flight == 0 and site.queue.find(job.id) is None


def test_a_cancelled_job_whose_worker_is_killed_is_cancelled_not_run_again(site: Site) -> None:
    [job] = site.produce(1, sleep_ms=5000)
    worker = site.spawn(threads=1)
    wait_until(lambda: site.counts().in_flight == 1, what="the job to be claimed")
    assert _cancel(site, job.id) is CancelResult.REQUESTED
    worker.kill()
    site.drain(timeout_s=40)  # its lease keeper finds the abandoned, cancel-requested claim
    assert _status(site, job.id) is JobStatus.CANCELLED
    [(reruns,)] = site.ledger.query(
        "SELECT count(*) FROM executions WHERE job_id = ? AND pid = ?", (str(job.id), os.getpid())
    )
    assert reruns == 0, "the draining worker never ran the cancelled job again"
