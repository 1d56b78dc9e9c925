"""Sweep cases for the store reads the dashboard pages make: history filtered by
queue, job type, tenant and status, paged and counted in the store
(`find_history`, `count_history`), and finished records per minute
(`finished_per_minute`). Each runs on every backend through
`test_adapter_surface.py`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import attrs
from backends import Backend
from conveyor.core import ErrorInfo, Job, JobStatus, Policies, Succeeded, dead_letter, decide, start
from conveyor.core.retention import PruneOrder
from conveyor.shell.ports import BatchingJobQueue, Claim, HistoryFilter
from helpers import T0, make_job

#: A whole minute, so the per-minute buckets below start on it.
MINUTE0 = T0.replace(second=0, microsecond=0)


def _outcome(job: Job, when: datetime, dead: bool) -> Job:
    running = start(job, when).unwrap()
    if dead:
        return dead_letter(running, ErrorInfo("Boom", "no", False), when).job
    return decide(running, Succeeded(1), when, Policies(), 0.5).job


def _recorded(
    b: Backend,
    job_type: str = "work",
    *,
    queue: str = "default",
    tenant: str | None = None,
    when: datetime = T0,
    dead: bool = False,
) -> Job:
    record = _outcome(make_job(job_type, queue=queue, tenant_id=tenant), when, dead)
    b.store.record(record)
    return record


def _ids(jobs: object) -> list[str]:
    return [str(job.id) for job in jobs]  # type: ignore[attr-defined]


def history_is_filtered_by_queue_and_type_in_the_store(b: Backend) -> None:
    made = []
    for n in range(12):
        made.append(
            _recorded(
                b,
                "mail" if n % 2 else "resize",
                queue="fast" if n % 3 else "slow",
                tenant="acme" if n % 4 == 0 else None,
                dead=n % 5 == 0,
            )
        )
    newest = list(reversed(made))

    def expected(where: HistoryFilter) -> list[Job]:
        return [
            j
            for j in newest
            if (where.status is None or j.status is where.status)
            and (where.queue is None or j.queue == where.queue)
            and (where.job_type is None or j.job_type == where.job_type)
            and (where.tenant_id is None or j.tenant_id == where.tenant_id)
        ]

    dead, done = JobStatus.FAILED, JobStatus.COMPLETED
    for where in (
        HistoryFilter(status=done, job_type="mail"),
        HistoryFilter(status=dead, job_type="resize"),
        HistoryFilter(status=done, queue="fast"),
        HistoryFilter(status=dead, queue="slow"),
        HistoryFilter(status=done, queue="fast", job_type="mail"),
        HistoryFilter(status=done, tenant_id="acme", job_type="resize"),
        HistoryFilter(job_type="mail"),
        HistoryFilter(queue="slow", tenant_id="acme"),
        HistoryFilter(status=done),
        HistoryFilter(),
    ):
        want = expected(where)
        assert _ids(b.store.find_history(where, limit=100)) == _ids(want), where
        assert b.store.count_history(where) == len(want), where


def history_listing_pages_by_offset(b: Backend) -> None:
    made = [_recorded(b, "mail", queue="fast") for _ in range(7)]
    _recorded(b, "other", queue="fast")
    newest = _ids(reversed(made))
    where = HistoryFilter(status=JobStatus.COMPLETED, job_type="mail")
    pages = [_ids(b.store.find_history(where, offset=at, limit=3)) for at in (0, 3, 6, 9)]
    assert pages == [newest[0:3], newest[3:6], newest[6:7], []]
    anywhere = HistoryFilter(queue="fast", job_type="mail")
    assert _ids(b.store.find_history(anywhere, offset=2, limit=2)) == newest[2:4]


def finished_per_minute_counts_completed_and_dead_by_minute(b: Backend) -> None:
    _recorded(b, when=MINUTE0 + timedelta(seconds=5))
    _recorded(b, when=MINUTE0 + timedelta(seconds=59))
    _recorded(b, when=MINUTE0 + timedelta(minutes=2, seconds=1), dead=True)
    _recorded(b, when=MINUTE0 + timedelta(minutes=2, seconds=30))
    _recorded(b, when=MINUTE0 - timedelta(seconds=1))  # before the window
    _recorded(b, when=MINUTE0 + timedelta(minutes=3))  # after it
    counts = b.store.finished_per_minute(MINUTE0 + timedelta(seconds=20), 3)
    assert counts.start == MINUTE0
    assert counts.completed == (2, 0, 1)
    assert counts.failed == (0, 0, 1)


def finished_per_minute_counts_a_time_of_any_zone_in_its_utc_minute(b: Backend) -> None:
    # 00:59:30 at +02:00 is 22:59:30 UTC the day before: across a day and a month.
    start = datetime(2026, 2, 28, 22, 59, tzinfo=UTC)
    zone = timezone(timedelta(hours=2))
    _recorded(b, when=datetime(2026, 3, 1, 0, 59, 30, tzinfo=zone))
    _recorded(b, when=datetime(2026, 3, 1, 1, 0, 1, tzinfo=zone), dead=True)
    counts = b.store.finished_per_minute(start, 2)
    assert (counts.completed, counts.failed) == ((1, 0), (0, 1))


def finished_per_minute_counts_records_written_by_the_queue(b: Backend) -> None:
    jobs = [make_job() for _ in range(3)]
    for job in jobs:
        b.queue.enqueue(job)
    when = MINUTE0 + timedelta(seconds=10)
    claims = []
    for _ in jobs:
        claim = b.queue.dequeue("default", when)
        assert isinstance(claim, Claim)
        claims.append(claim)
    first, *rest = claims
    assert b.queue.finish(first, _outcome(first.job, when, dead=True))
    items = [(c, _outcome(c.job, when, dead=False)) for c in rest]
    if isinstance(b.queue, BatchingJobQueue):
        assert list(b.queue.finish_many(items)) == [True, True]
    else:
        assert all(b.queue.finish(c, record) for c, record in items)
    counts = b.store.finished_per_minute(MINUTE0, 1)
    assert (counts.completed, counts.failed) == ((2,), (1,))
    where = HistoryFilter(status=JobStatus.COMPLETED, job_type="work", queue="default")
    assert sorted(_ids(b.store.find_history(where))) == sorted(_ids(c.job for c in rest))


def records_that_leave_the_store_leave_the_filtered_reads(b: Backend) -> None:
    old = _recorded(b, "mail", when=MINUTE0)
    kept = _recorded(b, "mail", when=MINUTE0 + timedelta(days=2))
    dead = _recorded(b, "mail", when=MINUTE0, dead=True)
    assert b.store.purge_dead(dead.id) == 1
    order = PruneOrder(
        completed_before=MINUTE0 + timedelta(days=1),
        dead_before=None,
        keep_completed=None,
        keep_dead=None,
        limit=10,
    )
    assert b.store.prune(order) == 1
    assert _ids(b.store.find_history(HistoryFilter(job_type="mail"))) == [str(kept.id)]
    assert b.store.count_history(HistoryFilter(status=JobStatus.FAILED, job_type="mail")) == 0
    counts = b.store.finished_per_minute(MINUTE0, 1)
    assert (counts.completed, counts.failed) == ((0,), (0,)), old


def a_record_recorded_again_moves_between_the_filtered_reads(b: Backend) -> None:
    dead = _recorded(b, "mail", queue="fast", when=MINUTE0, dead=True)
    # Recorded again (as a retried dead letter's next outcome is), now completed.
    again = attrs.evolve(
        dead, status=JobStatus.COMPLETED, finished_at=MINUTE0 + timedelta(minutes=1)
    )
    b.store.record(again)
    assert b.store.count_history(HistoryFilter(status=JobStatus.FAILED, queue="fast")) == 0
    found = b.store.find_history(HistoryFilter(status=JobStatus.COMPLETED, job_type="mail"))
    assert _ids(found) == [str(dead.id)]
    counts = b.store.finished_per_minute(MINUTE0, 2)
    assert (counts.completed, counts.failed) == ((0, 1), (0, 0))


DASHBOARD_STORE_CASES = (
    history_is_filtered_by_queue_and_type_in_the_store,
    history_listing_pages_by_offset,
    finished_per_minute_counts_completed_and_dead_by_minute,
    finished_per_minute_counts_a_time_of_any_zone_in_its_utc_minute,
    finished_per_minute_counts_records_written_by_the_queue,
    records_that_leave_the_store_leave_the_filtered_reads,
    a_record_recorded_again_moves_between_the_filtered_reads,
)
