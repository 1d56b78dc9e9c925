"""One contract, every backend: the adapter-surface sweep.

Each case below is a small scenario over the `JobQueue` / `JobStore` ports,
run against memory, SQLite, PostgreSQL and Redis. Where backends genuinely
cannot agree, the case is listed in `KNOWN_DIFFERENCES` with its reason and the
documented behaviour is asserted instead; nothing is dropped.

**A new `JobQueue` operation gets a case in this file on the way in.**

The reusable hypothesis state machine (`conveyor.testing.state_machine`) runs on
every backend too: memory in `test_memory_state_machine.py`, SQLite and
PostgreSQL in `test_sql_state_machine.py`, Redis in `test_redis_state_machine.py`.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable
from datetime import timedelta

import attrs
import pytest
from backends import BACKENDS, HOW_TO_PROVIDE, Backend, make_backend
from conveyor.core import (
    Complete,
    JobStatus,
    Policies,
    Priority,
    Succeeded,
    ValidationError,
    create_job,
    decide,
    reclaim_cutoff,
    start,
)
from conveyor.core.decisions import dead_letter, decide_reclaim
from conveyor.core.job import ErrorInfo
from conveyor.core.policies import LeasePolicy
from conveyor.shell.executor import Executor
from conveyor.shell.ports import BadClaim, Claim, FinishingJobQueue, is_transactional
from conveyor.shell.registry import Registry
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job
from returns.result import Failure
from sweep_asyncio import ASYNCIO_CASES
from sweep_bulk import BULK_CASES
from sweep_cancel import CANCEL_CASES
from sweep_cron import CRON_CASES
from sweep_dashboard_store import DASHBOARD_STORE_CASES
from sweep_facts import FACT_CASES
from sweep_hotpath import HOTPATH_CASES
from sweep_limit_usage import LIMIT_USAGE_CASES
from sweep_limits import LIMIT_CASES
from sweep_operations import OPERATION_CASES
from sweep_timeouts import TIMEOUT_CASES
from sweep_trust import TRUST_CASES
from sweep_unique import UNIQUE_CASES

LATER = T0 + timedelta(seconds=10)


def _claim(b: Backend, queue: str = "default", now=T0) -> Claim:
    claim = b.queue.dequeue(queue, now)
    assert isinstance(claim, Claim), f"expected a claim, got {claim!r}"
    return claim


def _drain_ids(b: Backend, queue: str = "default", now=T0) -> list:
    ids = []
    while (claim := b.queue.dequeue(queue, now)) is not None:
        ids.append(claim.job.id)
        assert b.queue.ack(claim)
    return ids


# ---- the cases ------------------------------------------------------------


def fifo_within_a_priority(b: Backend) -> None:
    jobs = [make_job(args={"i": i}) for i in range(20)]
    for job in jobs:
        b.queue.enqueue(job)
    assert _drain_ids(b) == [j.id for j in jobs]


def priority_order(b: Backend) -> None:
    jobs = [make_job(priority=p) for p in ("low", "normal", "high", "critical") for _ in range(3)]
    for job in jobs:
        b.queue.enqueue(job)
    want = sorted(jobs, key=lambda j: (j.priority.rank, jobs.index(j)))
    assert _drain_ids(b) == [j.id for j in want]


def queues_are_separate(b: Backend) -> None:
    a, c = make_job(queue="a"), make_job(queue="c")
    b.queue.enqueue(a)
    b.queue.enqueue(c)
    assert b.queue.dequeue("nope", T0) is None
    assert _drain_ids(b, "c") == [c.id]
    assert _drain_ids(b, "a") == [a.id]


def upsert_by_id(b: Backend) -> None:
    job = make_job()
    b.queue.enqueue(job)
    b.queue.enqueue(attrs.evolve(job, priority=Priority.HIGH))
    assert b.queue.counts(T0)["default"].ready == 1
    claim = _claim(b)
    assert claim.job.priority is Priority.HIGH
    assert b.queue.dequeue("default", T0) is None


def ack_only_with_the_live_token(b: Backend) -> None:
    b.queue.enqueue(make_job())
    claim = _claim(b)
    forged = attrs.evolve(claim, token="not-the-token")
    assert b.queue.ack(forged) is False
    assert b.queue.counts(T0)["default"].in_flight == 1
    assert b.queue.ack(claim) is True
    assert b.queue.ack(claim) is False, "a second ack finds nothing"
    assert b.queue.counts(T0).get("default") is None or b.queue.counts(T0)["default"].in_flight == 0


def every_claim_gets_a_fresh_token(b: Backend) -> None:
    job = make_job()
    b.queue.enqueue(job)
    first = _claim(b)
    b.queue.enqueue(job)
    second = _claim(b)
    assert first.token != second.token


def a_stale_ack_is_a_no_op(b: Backend) -> None:
    b.queue.enqueue(make_job())
    first = _claim(b)
    cutoff = reclaim_cutoff(LATER, 1000)
    [stale] = b.queue.abandoned(cutoff)
    assert b.queue.reclaim(stale, first.job, cutoff)
    second = _claim(b, now=LATER)
    assert b.queue.ack(first) is False
    assert b.queue.extend(first, LATER) is False
    assert b.queue.replace(first, first.job) is False
    assert b.queue.counts(LATER)["default"].in_flight == 1
    assert b.queue.ack(second) is True


def ack_leaves_a_reenqueued_job(b: Backend) -> None:
    job = make_job()
    b.queue.enqueue(job)
    claim = _claim(b)
    b.queue.enqueue(job)
    assert b.queue.ack(claim) is False
    assert _drain_ids(b) == [job.id]


def replace_parks_or_readies_and_unlocks(b: Backend) -> None:
    job = make_job()
    b.queue.enqueue(job)
    claim = _claim(b)
    running = start(claim.job, T0).unwrap()
    parked = attrs.evolve(running, status=JobStatus.RETRYING, run_at=T0 + timedelta(seconds=5))
    assert b.queue.replace(claim, parked)
    assert b.queue.ack(claim) is False, "the ack after replace finds nothing of ours"
    c = b.queue.counts(T0)["default"]
    assert (c.ready, c.scheduled, c.in_flight) == (0, 1, 0)
    assert b.queue.promote_due(T0 + timedelta(seconds=5)) == 1
    again = _claim(b, now=T0 + timedelta(seconds=5))
    assert again.job.retry_count == parked.retry_count and again.job.status is JobStatus.RETRYING


def schedule_then_promote(b: Backend) -> None:
    later_job = make_job(delay=timedelta(seconds=30))
    b.queue.enqueue(later_job)
    assert b.queue.dequeue("default", T0) is None
    assert b.queue.promote_due(T0 + timedelta(seconds=29)) == 0
    assert b.queue.promote_due(T0 + timedelta(seconds=30)) == 1, "due at exactly run_at"
    assert b.queue.promote_due(T0 + timedelta(seconds=31)) == 0, "moved once"
    assert _drain_ids(b, now=T0 + timedelta(seconds=30)) == [later_job.id]


def promoted_jobs_go_behind_ready_ones(b: Backend) -> None:
    parked = make_job(delay=timedelta(seconds=1))
    b.queue.enqueue(parked)
    ready = make_job(now=T0 + timedelta(seconds=2))
    b.queue.enqueue(ready)
    b.queue.promote_due(T0 + timedelta(seconds=2))
    assert _drain_ids(b) == [ready.id, parked.id]


def promotion_is_claimed_once_under_concurrency(b: Backend) -> None:
    jobs = [make_job(delay=timedelta(seconds=1)) for _ in range(200)]
    for job in jobs:
        b.queue.enqueue(job)
    queues = [b.queue] + [b.peer()[0] for _ in range(3)] if b.peer else [b.queue] * 4
    moved: list[int] = []
    barrier = threading.Barrier(len(queues))

    def promote(q) -> None:
        barrier.wait()
        total = 0
        while (n := q.promote_due(T0 + timedelta(seconds=1), limit=25)) > 0:
            total += n
        moved.append(total)

    threads = [threading.Thread(target=promote, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(moved) == 200
    assert sorted(_drain_ids(b), key=str) == sorted((j.id for j in jobs), key=str)


def reclaim_after_the_lease(b: Backend) -> None:
    job = make_job()
    b.queue.enqueue(job)
    claim = _claim(b)
    assert b.queue.abandoned(reclaim_cutoff(T0, 1000)) == []
    b.queue.extend(claim, T0 + timedelta(seconds=5))
    assert b.queue.abandoned(reclaim_cutoff(T0 + timedelta(seconds=5), 1000)) == []
    cutoff = reclaim_cutoff(T0 + timedelta(seconds=7), 1000)
    [found] = b.queue.abandoned(cutoff)
    assert found.token == claim.token and found.job.id == job.id
    decision = decide_reclaim(start(found.job, LATER).unwrap(), LATER, LeasePolicy(1000), cutoff)
    assert b.queue.reclaim(found, decision.job, cutoff)
    assert not b.queue.reclaim(found, decision.job, cutoff), "only once"
    again = _claim(b, now=LATER)
    assert again.job.metadata.reclaim_count == 1


def reclaim_rechecks_inside_the_write(b: Backend) -> None:
    b.queue.enqueue(make_job())
    claim = _claim(b)
    cutoff = reclaim_cutoff(LATER, 1000)
    [found] = b.queue.abandoned(cutoff)
    assert b.queue.ack(claim)  # completed between the reclaimer's read and its write
    assert b.queue.reclaim(found, found.job, cutoff) is False
    assert b.queue.dequeue("default", LATER) is None
    b.queue.enqueue(make_job())
    live = _claim(b)
    b.queue.extend(live, LATER)  # a heartbeat arrived meanwhile
    assert b.queue.reclaim(live, live.job, cutoff) is False


def reclaim_from_another_process(b: Backend) -> None:
    assert b.peer is not None
    b.queue.enqueue(make_job())
    _claim(b)  # this process then dies
    other_queue, _ = b.peer()
    cutoff = reclaim_cutoff(LATER, 1000)
    [found] = other_queue.abandoned(cutoff)
    assert other_queue.reclaim(found, found.job, cutoff)
    assert isinstance(other_queue.dequeue("default", LATER), Claim)


def a_poison_pill_is_dead_lettered(b: Backend) -> None:
    clock = ManualClock(T0)
    policies = Policies(lease=LeasePolicy(lease_ms=1000, max_reclaims=1))
    worker = Worker(b.queue, b.store, Registry(), clock=clock, policies=policies, clock_check=False)
    job = make_job(max_retries=1)
    b.queue.enqueue(job)
    for _ in range(2):
        assert isinstance(b.queue.dequeue("default", clock.now()), Claim)
        clock.advance(1001)
        worker.reclaim_abandoned(clock.now())
    [dead] = b.store.list_dead()
    assert dead.id == job.id and dead.last_error.type == "lease-expired"
    assert b.queue.dequeue("default", clock.now()) is None


def dead_letters_list_and_purge(b: Backend) -> None:
    jobs = [make_job(queue=q, tenant_id=t) for q, t in (("a", "t1"), ("a", "t2"), ("c", "t1"))]
    for job in jobs:
        running = start(job, T0).unwrap()
        b.store.record(dead_letter(running, ErrorInfo("Boom", "no"), T0).job)
    done = start(make_job(), T0).unwrap()
    b.store.record(attrs.evolve(done, status=JobStatus.COMPLETED))
    assert [j.id for j in b.store.list_dead()] == [j.id for j in reversed(jobs)], "newest first"
    assert {j.id for j in b.store.list_dead(tenant_id="t1")} == {jobs[0].id, jobs[2].id}
    assert dict(b.store.count_dead()) == {"a": 2, "c": 1}
    assert dict(b.store.count_dead(tenant_id="t2")) == {"a": 1}
    assert b.store.get(done.id).status is JobStatus.COMPLETED
    assert b.store.purge_dead(jobs[0].id) == 1
    assert b.store.purge_dead() == 2
    assert b.store.list_dead() == []
    assert b.store.get(done.id) is not None, "purge leaves history alone"


def counts_for_status(b: Backend) -> None:
    b.queue.enqueue(make_job(now=T0 - timedelta(seconds=3)))
    b.queue.enqueue(make_job())
    b.queue.enqueue(make_job(delay=timedelta(minutes=1)))
    b.queue.enqueue(make_job(queue="other"))
    _claim(b, "other")
    counts = b.queue.counts(T0)
    d, o = counts["default"], counts["other"]
    assert (d.ready, d.scheduled, d.in_flight) == (2, 1, 0)
    assert (o.ready, o.scheduled, o.in_flight) == (0, 0, 1)
    assert d.oldest_ready_at == T0 - timedelta(seconds=3)


def transactional_enqueue(b: Backend) -> None:
    assert is_transactional(b.queue)
    engine = b.queue.engine
    job = make_job()
    with engine.connect() as conn:
        conn.begin()
        b.queue.enqueue_in_tx(conn, job)
        # A read from another connection (SQLite allows one writer at a time).
        assert "default" not in b.queue.counts(T0), "invisible before commit"
        conn.rollback()
    assert b.queue.dequeue("default", T0) is None, "rolled back with the business change"
    with engine.begin() as conn:
        b.queue.enqueue_in_tx(conn, job)
    assert _drain_ids(b) == [job.id]
    with pytest.raises(ValidationError) as info:
        b.queue.enqueue_in_tx(engine, job)
    assert info.value.fields == ("conn",)


def an_undecodable_payload_is_a_bad_claim(b: Backend) -> None:
    assert b.corrupt is not None
    job = make_job()
    b.queue.enqueue(job)
    b.corrupt(job, pickle.dumps({"evil": True}, protocol=0).decode("ascii"))
    bad = b.queue.dequeue("default", T0)
    assert isinstance(bad, BadClaim) and bad.job_id == str(job.id)
    assert b.queue.ack(bad) is True
    assert b.queue.dequeue("default", T0) is None


def hostile_names_are_rejected_before_any_backend(b: Backend) -> None:
    for name in ("a'b", "a;b", "a\x00b", "x" * 10_000, "{x}", "a:b", ""):
        made = create_job(id=make_job().id, job_type=name, now=T0, queue=name)
        assert isinstance(made, Failure)
        assert {"job_type", "queue"} <= set(made.failure().fields)
    assert b.queue.dequeue("a'b", T0) is None


def finish_records_and_releases_in_one_step(b: Backend) -> None:
    assert isinstance(b.queue, FinishingJobQueue) and b.queue.finishes_with(b.store)
    job = make_job()
    b.queue.enqueue(job)
    claim = _claim(b)
    done = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job
    stale = attrs.evolve(claim, token="stale")
    assert b.queue.finish(stale, done) is False
    assert b.store.get(job.id) is None, "a lost claim writes nothing"
    assert b.queue.counts(T0)["default"].in_flight == 1
    assert b.queue.finish(claim, done) is True
    assert b.store.get(job.id).status is JobStatus.COMPLETED
    assert b.queue.counts(T0).get("default") is None or b.queue.counts(T0)["default"].in_flight == 0
    assert b.queue.finish(claim, done) is False, "only once"
    steps = Executor(b.queue, b.store).plan(claim, Complete(done))
    assert [(st.kind, st.name) for st in steps] == [("write", "finish")]


def claims_in_batches_with_their_own_tokens(b: Backend) -> None:
    jobs = [make_job(priority=p) for p in ("low", "high", "normal", "critical", "high")]
    for job in jobs:
        b.queue.enqueue(job)
    claims = b.queue.dequeue_many("default", T0, 3)
    want = sorted(jobs, key=lambda j: (j.priority.rank, jobs.index(j)))[:3]
    assert [c.job.id for c in claims] == [j.id for j in want]
    assert len({c.token for c in claims}) == 3
    assert b.queue.counts(T0)["default"].in_flight == 3
    done = [
        (c, decide(start(c.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job)
        for c in claims
    ]
    done[1] = (attrs.evolve(done[1][0], token="stale"), done[1][1])
    assert list(b.queue.finish_many(done)) == [True, False, True], "each job fenced on its own"
    assert b.store.get(claims[1].job.id) is None
    assert b.queue.counts(T0)["default"].in_flight == 1
    assert b.queue.ack(claims[1]) is True
    rest = b.queue.dequeue_many("default", T0, 10)
    assert [c.job.id for c in rest] == [
        j.id for j in sorted(jobs, key=lambda j: (j.priority.rank, jobs.index(j)))[3:]
    ]


def bulk_enqueue_keeps_list_order_and_upserts(b: Backend) -> None:
    jobs = [make_job(args={"i": i}) for i in range(50)]
    parked = make_job(delay=timedelta(seconds=5))
    b.queue.enqueue(jobs[0])
    b.queue.enqueue_many([*jobs, parked, attrs.evolve(jobs[3], priority=Priority.HIGH)])
    c = b.queue.counts(T0)["default"]
    assert (c.ready, c.scheduled) == (50, 1), "one row per id, the parked one scheduled"
    order = _drain_ids(b)
    assert order[0] == jobs[3].id, "the last version of a repeated id wins"
    assert order[1:] == [j.id for j in jobs if j is not jobs[3]]
    b.queue.enqueue_many([])


AWKWARD_TEXT = 'quote " backslash \\ nul \x00 newline \n tab \t emoji \U0001f600 ünïcode \\u0000'


def batches_carry_any_text_unchanged(b: Backend) -> None:
    jobs = [make_job(args={"s": AWKWARD_TEXT, AWKWARD_TEXT: [i]}) for i in range(3)]
    b.queue.enqueue_many(jobs)
    claims = [c for c in b.queue.dequeue_many("default", T0, 10) if isinstance(c, Claim)]
    assert [c.job.args for c in claims] == [j.args for j in jobs]
    records = [
        (c, decide(start(c.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job)
        for c in claims
    ]
    assert list(b.queue.finish_many(records)) == [True] * 3
    for job in jobs:
        recorded = b.store.get(job.id)
        assert recorded is not None and recorded.args == job.args


CASES: dict[str, Callable[[Backend], None]] = {
    f.__name__: f
    for f in (
        fifo_within_a_priority,
        priority_order,
        queues_are_separate,
        upsert_by_id,
        ack_only_with_the_live_token,
        every_claim_gets_a_fresh_token,
        a_stale_ack_is_a_no_op,
        ack_leaves_a_reenqueued_job,
        replace_parks_or_readies_and_unlocks,
        schedule_then_promote,
        promoted_jobs_go_behind_ready_ones,
        promotion_is_claimed_once_under_concurrency,
        reclaim_after_the_lease,
        reclaim_rechecks_inside_the_write,
        reclaim_from_another_process,
        a_poison_pill_is_dead_lettered,
        dead_letters_list_and_purge,
        counts_for_status,
        transactional_enqueue,
        an_undecodable_payload_is_a_bad_claim,
        hostile_names_are_rejected_before_any_backend,
        finish_records_and_releases_in_one_step,
        claims_in_batches_with_their_own_tokens,
        bulk_enqueue_keeps_list_order_and_upserts,
        batches_carry_any_text_unchanged,
        *TRUST_CASES,
        *OPERATION_CASES,
        *UNIQUE_CASES,
        *CANCEL_CASES,
        *TIMEOUT_CASES,
        *CRON_CASES,
        *ASYNCIO_CASES,
        *DASHBOARD_STORE_CASES,
        *LIMIT_CASES,
        *LIMIT_USAGE_CASES,
        *FACT_CASES,
        *HOTPATH_CASES,
        *BULK_CASES,
    )
}


def _not_transactional(b: Backend) -> None:
    assert not is_transactional(b.queue)
    assert not hasattr(b.queue, "enqueue_in_tx")


def _no_other_process(b: Backend) -> None:
    assert b.peer is None
    b.queue.enqueue(make_job())
    _claim(b)
    # A second adapter (what another process would have) sees none of this one's claims.
    from conveyor.shell.adapters.memory import MemoryJobQueue

    assert MemoryJobQueue().abandoned(reclaim_cutoff(LATER, 1000)) == []
    # Within its own process it still honours the lease.
    assert len(b.queue.abandoned(reclaim_cutoff(LATER, 1000))) == 1


def _stores_values(b: Backend) -> None:
    assert b.corrupt is None
    job = make_job()
    b.queue.enqueue(job)
    claim = b.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and claim.job == job


def test_a_queue_that_cannot_finish_with_the_store_goes_step_by_step() -> None:
    from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore

    queue, elsewhere = MemoryJobQueue(MemoryJobStore()), MemoryJobStore()
    queue.enqueue(make_job())
    claim = queue.dequeue("default", T0)
    done = decide(start(claim.job, T0).unwrap(), Succeeded(1), T0, Policies(), 0.5).job
    steps = Executor(queue, elsewhere).plan(claim, Complete(done))
    assert [st.name for st in steps] == ["extend", "record", "ack"]


#: (case, backend) -> (why they cannot agree, what is asserted instead)
KNOWN_DIFFERENCES: dict[tuple[str, str], tuple[str, Callable[[Backend], None]]] = {
    ("transactional_enqueue", "memory"): (
        "an outbox needs the queue in the caller's database",
        _not_transactional,
    ),
    ("transactional_enqueue", "redis"): (
        "an outbox needs the queue in the caller's database",
        _not_transactional,
    ),
    ("reclaim_from_another_process", "memory"): (
        "memory has no in-flight list shared across processes",
        _no_other_process,
    ),
    ("an_undecodable_payload_is_a_bad_claim", "memory"): (
        "memory stores Job values, never bytes, so nothing fails to decode",
        _stores_values,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_case(case: str, backend: Backend) -> None:
    known = KNOWN_DIFFERENCES.get((case, backend.name))
    if known is not None:
        known[1](backend)
    else:
        CASES[case](backend)


def test_known_differences_name_real_cases_and_backends() -> None:
    for case, name in KNOWN_DIFFERENCES:
        assert case in CASES and name in BACKENDS


def test_sweep_covers_every_backend() -> None:
    """Fails, naming the backend and how to provide it, when any server is missing."""
    missing = []
    for name in BACKENDS:
        try:
            made = make_backend(name)
            made.queue.counts(T0)
            made.cleanup()
        except Exception as exc:
            missing.append(f"{name}: {type(exc).__name__}: {exc} ({HOW_TO_PROVIDE[name]})")
    assert not missing, "the sweep cannot run on every backend:\n" + "\n".join(missing)
