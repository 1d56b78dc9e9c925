"""Cases of the store reads the dashboard pages make: history filtered by queue, job
type, tenant and status, paged and counted in the store (`find_history`,
`count_history`), and finished records per minute (`finished_per_minute`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import attrs

from ....core import ErrorInfo, Job, JobStatus, Policies, Succeeded, dead_letter, decide, start
from ....shell.ports import (
    BatchingJobQueue,
    Claim,
    HistoryFilter,
    ManyReadingStore,
    records_of,
)
from ..case import case
from ..subject import FINISHING, Subject
from ..support import T0, make_job, prune_order

#: A whole minute, so the per-minute buckets below start on it.
MINUTE0 = T0.replace(second=0, microsecond=0)


def _outcome(job: Job, when: datetime, dead: bool) -> Job:
    running = start(job, when).unwrap()
    if dead:
        return dead_letter(running, ErrorInfo("Boom", "no", False), when).job
    return decide(running, Succeeded(1), when, Policies(), 0.5).job


def _recorded(
    s: Subject,
    job_type: str = "work",
    *,
    queue: str = "default",
    tenant: str | None = None,
    when: datetime = T0,
    dead: bool = False,
) -> Job:
    record = _outcome(make_job(job_type, queue=queue, tenant_id=tenant), when, dead)
    s.store.record(record)
    return record


def _ids(jobs: object) -> list[str]:
    return [str(job.id) for job in jobs]  # type: ignore[attr-defined]


@case()
def history_is_filtered_by_queue_and_type_in_the_store(s: Subject) -> None:
    made = []
    for n in range(12):
        made.append(
            _recorded(
                s,
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
        # Empty names are nobody's: they match nothing, never "any".
        HistoryFilter(tenant_id=""),
        HistoryFilter(status=dead, queue=""),
        HistoryFilter(job_type=""),
    ):
        want = expected(where)
        assert _ids(s.store.find_history(where, limit=100)) == _ids(want), where
        assert s.store.count_history(where) == len(want), where


@case()
def history_listing_pages_by_offset(s: Subject) -> None:
    made = [_recorded(s, "mail", queue="fast") for _ in range(7)]
    _recorded(s, "other", queue="fast")
    newest = _ids(reversed(made))
    where = HistoryFilter(status=JobStatus.COMPLETED, job_type="mail")
    pages = [_ids(s.store.find_history(where, offset=at, limit=3)) for at in (0, 3, 6, 9)]
    assert pages == [newest[0:3], newest[3:6], newest[6:7], []]
    anywhere = HistoryFilter(queue="fast", job_type="mail")
    assert _ids(s.store.find_history(anywhere, offset=2, limit=2)) == newest[2:4]


@case()
def finished_per_minute_counts_completed_and_dead_by_minute(s: Subject) -> None:
    _recorded(s, when=MINUTE0 + timedelta(seconds=5))
    _recorded(s, when=MINUTE0 + timedelta(seconds=59))
    _recorded(s, when=MINUTE0 + timedelta(minutes=2, seconds=1), dead=True)
    _recorded(s, when=MINUTE0 + timedelta(minutes=2, seconds=30))
    _recorded(s, when=MINUTE0 - timedelta(seconds=1))  # before the window
    _recorded(s, when=MINUTE0 + timedelta(minutes=3))  # after it
    counts = s.store.finished_per_minute(MINUTE0 + timedelta(seconds=20), 3)
    assert counts.start == MINUTE0
    assert counts.completed == (2, 0, 1)
    assert counts.failed == (0, 0, 1)


@case()
def finished_per_minute_counts_a_time_of_any_zone_in_its_utc_minute(s: Subject) -> None:
    # 00:59:30 at +02:00 is 22:59:30 UTC the day before: across a day and a month.
    start = datetime(2026, 2, 28, 22, 59, tzinfo=UTC)
    zone = timezone(timedelta(hours=2))
    _recorded(s, when=datetime(2026, 3, 1, 0, 59, 30, tzinfo=zone))
    _recorded(s, when=datetime(2026, 3, 1, 1, 0, 1, tzinfo=zone), dead=True)
    counts = s.store.finished_per_minute(start, 2)
    assert (counts.completed, counts.failed) == ((1, 0), (0, 1))


@case(FINISHING)
def finished_per_minute_counts_records_written_by_the_queue(s: Subject) -> None:
    jobs = [make_job() for _ in range(3)]
    for job in jobs:
        s.queue.enqueue(job)
    when = MINUTE0 + timedelta(seconds=10)
    claims = []
    for _ in jobs:
        claim = s.queue.dequeue("default", when)
        assert isinstance(claim, Claim)
        claims.append(claim)
    first, *rest = claims
    assert s.queue.finish(first, _outcome(first.job, when, dead=True))
    items = [(c, _outcome(c.job, when, dead=False)) for c in rest]
    if isinstance(s.queue, BatchingJobQueue):
        assert list(s.queue.finish_many(items)) == [True, True]
    else:
        assert all(s.queue.finish(c, record) for c, record in items)
    counts = s.store.finished_per_minute(MINUTE0, 1)
    assert (counts.completed, counts.failed) == ((2,), (1,))
    where = HistoryFilter(status=JobStatus.COMPLETED, job_type="work", queue="default")
    assert sorted(_ids(s.store.find_history(where))) == sorted(_ids(c.job for c in rest))


@case()
def records_that_leave_the_store_leave_the_filtered_reads(s: Subject) -> None:
    old = _recorded(s, "mail", when=MINUTE0)
    kept = _recorded(s, "mail", when=MINUTE0 + timedelta(days=2))
    dead = _recorded(s, "mail", when=MINUTE0, dead=True)
    assert s.store.purge_dead(dead.id) == 1
    order = prune_order(completed_before=MINUTE0 + timedelta(days=1))
    assert s.store.prune(order) == 1
    assert _ids(s.store.find_history(HistoryFilter(job_type="mail"))) == [str(kept.id)]
    assert s.store.count_history(HistoryFilter(status=JobStatus.FAILED, job_type="mail")) == 0
    counts = s.store.finished_per_minute(MINUTE0, 1)
    assert (counts.completed, counts.failed) == ((0,), (0,)), old


@case()
def a_record_recorded_again_moves_between_the_filtered_reads(s: Subject) -> None:
    dead = _recorded(s, "mail", queue="fast", when=MINUTE0, dead=True)
    # Recorded again (as a retried dead letter's next outcome is), now completed.
    again = attrs.evolve(
        dead, status=JobStatus.COMPLETED, finished_at=MINUTE0 + timedelta(minutes=1)
    )
    s.store.record(again)
    assert s.store.count_history(HistoryFilter(status=JobStatus.FAILED, queue="fast")) == 0
    found = s.store.find_history(HistoryFilter(status=JobStatus.COMPLETED, job_type="mail"))
    assert _ids(found) == [str(dead.id)]
    counts = s.store.finished_per_minute(MINUTE0, 2)
    assert (counts.completed, counts.failed) == ((0, 1), (0, 0))


@case()
def many_records_are_read_together_and_a_missing_id_is_left_out(s: Subject) -> None:
    """`get_many` (a fan-in's inputs, a workflow's members in one read): each record
    held among the ids, whatever queue it came from; an id without one is absent."""
    assert isinstance(s.store, ManyReadingStore), "a bundled store reads many at once"
    kept = [_recorded(s, queue=f"q{n}", dead=n == 3) for n in range(6)]
    missing = make_job("work").id
    asked = [kept[4].id, missing, kept[0].id, kept[3].id, kept[0].id]
    found = s.store.get_many(asked)
    assert set(found) == {kept[4].id, kept[0].id, kept[3].id}
    for job_id, job in found.items():
        assert job == s.store.get(job_id)
    assert found[kept[3].id].status is JobStatus.FAILED
    assert s.store.get_many([]) == {}
    assert records_of(s.store, asked) == dict(found)


DASHBOARD_STORE_CASES = (
    many_records_are_read_together_and_a_missing_id_is_left_out,
    history_is_filtered_by_queue_and_type_in_the_store,
    history_listing_pages_by_offset,
    finished_per_minute_counts_completed_and_dead_by_minute,
    finished_per_minute_counts_a_time_of_any_zone_in_its_utc_minute,
    finished_per_minute_counts_records_written_by_the_queue,
    records_that_leave_the_store_leave_the_filtered_reads,
    a_record_recorded_again_moves_between_the_filtered_reads,
)
