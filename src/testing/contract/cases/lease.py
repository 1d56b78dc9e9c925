"""Cases of the lease and the clock: the lease keeper's poison-pill write, refused
once the holder renews and landing while the claim is still abandoned; a retry and a
delayed job started when due, not at the next poll; and the server's clock, which a
skewed worker is refused against."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from ....core import JobStatus, Policies, Succeeded, decide, decide_reclaim, reclaim_cutoff, start
from ....core.policies import LeasePolicy
from ....shell.registry import Registry
from ....shell.worker.lease_keeper import ClockSkewError
from ....shell.worker.loop import Worker
from ...clock import ManualClock
from ..case import case
from ..subject import FINISHING, SERVER_CLOCK, Subject
from ..support import T0, claim, make_job

LEASE_MS = 1000


@case(FINISHING)
def a_poison_pill_write_is_refused_after_a_renewal(s: Subject) -> None:
    """The lease keeper reads an abandoned claim; its holder renews; the keeper's
    `lease-expired` dead letter must then be refused inside the same write."""
    job = make_job(max_retries=0)
    s.queue.enqueue(job)
    held = claim(s)
    later = T0 + timedelta(seconds=5)
    cutoff = reclaim_cutoff(later, LEASE_MS)
    [found] = s.queue.abandoned(cutoff)
    assert s.queue.extend(held, later)  # the holder was alive after all
    pill = decide_reclaim(
        start(found.job, later).unwrap(), later, LeasePolicy(LEASE_MS, max_reclaims=0), cutoff
    )
    assert pill.job.status is JobStatus.FAILED
    assert s.executor(s.queue, s.store).carry_out(found, pill) is False
    assert s.store.get(job.id) is None, "a live job was dead-lettered"
    done = decide(start(held.job, later).unwrap(), Succeeded(1), later, Policies(), 0.5).job
    assert s.queue.finish(held, done), "the holder's real outcome is accepted"


@case()
def a_still_abandoned_poison_pill_is_dead_lettered(s: Subject) -> None:
    job = make_job(max_retries=0)
    s.queue.enqueue(job)
    claim(s)
    later = T0 + timedelta(seconds=5)
    cutoff = reclaim_cutoff(later, LEASE_MS)
    [found] = s.queue.abandoned(cutoff)
    pill = decide_reclaim(
        start(found.job, later).unwrap(), later, LeasePolicy(LEASE_MS, max_reclaims=0), cutoff
    )
    assert s.executor(s.queue, s.store).carry_out(found, pill) is True
    assert s.store.get(job.id).last_error.type == "lease-expired"


@case()
def a_worker_starts_a_retry_when_its_backoff_ends(s: Subject) -> None:
    clock = ManualClock(T0)
    runs: list[datetime] = []

    def flaky(args: Any) -> None:
        runs.append(clock.now())
        raise ConnectionError("upstream down")

    policies = Policies(retry=attrs.evolve(Policies().retry, jitter=False))
    worker = Worker(
        s.queue,
        s.store,
        Registry({"work": flaky}),
        clock=clock,
        policies=policies,
        clock_check=False,
    )
    s.queue.enqueue(make_job(max_retries=2))
    assert worker.run_once() == 1
    assert worker._idle_timeout_s() == 1.0, "sleeps exactly until the retry is due"
    clock.advance(999)
    assert worker.run_once() == 0
    clock.advance(1)
    assert worker.run_once() == 1, "due at 1 s: claimed on the next round, not 5 s later"
    clock.advance(2000)
    assert worker.run_once() == 1
    assert [(r - T0).total_seconds() for r in runs] == [0.0, 1.0, 3.0]


@case()
def an_idle_worker_starts_delays_and_retries_on_time(s: Subject) -> None:
    """At default settings (a one-second poll), a delayed job and a retry start at their
    `run_at`, not at the next poll or promotion pass. The bounds are loose on purpose
    (a busy machine's commits, fsync'd, take their time): they tell waking on time
    from waiting for the poll, which would start the job 0.6 s late and the retry a
    second after the failure."""
    runs: list[float] = []

    def flaky(args: Any) -> None:
        runs.append(time.time())
        if len(runs) == 1:
            raise ConnectionError("first attempt fails")

    policies = Policies(retry=attrs.evolve(Policies().retry, initial_delay_ms=300, jitter=False))
    worker = Worker(s.queue, s.store, Registry({"work": flaky}), policies=policies)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        time.sleep(0.3)  # idle, in its one-second wait: 0.7 s of it left
        job = make_job(now=datetime.now(UTC), delay=timedelta(milliseconds=100))
        s.queue.enqueue(job)
        due = job.run_at.timestamp()
        deadline = time.monotonic() + 5
        while len(runs) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        worker.stop()
        thread.join()
    assert len(runs) == 2, f"ran {len(runs)} times in 5 s"
    assert 0 <= runs[0] - due < 0.45, f"the delayed job started {runs[0] - due:.3f} s late"
    gap = runs[1] - runs[0]
    assert 0.3 <= gap < 0.3 + 0.45, f"the retry came {gap:.3f} s after the failure (policy 0.3 s)"


@case(SERVER_CLOCK)
def the_lease_server_clock_is_checked(s: Subject) -> None:
    """Leases run on the server's clock, in UTC; a worker whose clock is off by more
    than a quarter lease is refused, and its lease keeper takes nothing."""
    server = s.queue.server_time()
    assert server is not None and server.utcoffset() == timedelta(0)
    assert abs(server - datetime.now(UTC)) < timedelta(seconds=2)
    ahead = ManualClock(datetime.now(UTC) + timedelta(seconds=40))
    worker = Worker(s.queue, s.store, Registry(), clock=ahead)  # lease 60 s: 15 s allowed
    try:
        worker.check_clock()
    except ClockSkewError as exc:
        assert "quarter of the lease" in str(exc)
    else:
        raise AssertionError("a worker 40 s ahead of the server was allowed to start")
    # A skewed lease keeper takes nothing, even claims that look expired by its clock.
    s.queue.enqueue(make_job())
    claim(s, datetime.now(UTC))
    assert worker.reclaim_abandoned(ahead.now() + timedelta(seconds=60)) == 0
    fine = Worker(s.queue, s.store, Registry(), clock=ManualClock(datetime.now(UTC)))
    fine.check_clock()


def one_clock(s: Subject) -> None:
    """A backend with no server between its workers (memory, SQLite) leases on this
    process's clock: it reports no server clock."""
    assert s.queue.server_time() is None, "one host, one clock"


LEASE_CASES = (
    a_poison_pill_write_is_refused_after_a_renewal,
    a_still_abandoned_poison_pill_is_dead_lettered,
    a_worker_starts_a_retry_when_its_backoff_ends,
    an_idle_worker_starts_delays_and_retries_on_time,
    the_lease_server_clock_is_checked,
)
