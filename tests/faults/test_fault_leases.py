"""Leases under slow jobs and frozen workers: heartbeats keep a claim, and a holder
whose lease ran out can no longer write anything."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime

import pytest
from conveyor.core import Job, JobStatus
from conveyor.shell.ports import Claim, QueueCounts
from fault_harness import LEASE_MS, Site, WorkerProc
from ledger import RELEASES

pytestmark = pytest.mark.timeout(60)

NO_HEARTBEAT = 10**9  # ms: the heartbeat never fires within a test


def only_token(site: Site, proc: WorkerProc) -> str:
    [token] = {w.token for w in site.ledger.writes() if w.op == "claim" and w.pid == proc.pid}
    return token


def released(site: Site, token: str) -> bool:
    return any(w.op in RELEASES and w.ok for w in site.ledger.writes(token))


def stop(*procs: WorkerProc) -> None:
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait() in (0, 3)


def overtaken(site: Site, slow: Job, refused_op: str) -> tuple[WorkerProc, WorkerProc, str]:
    """Run `slow` on a worker without heartbeats until a second one has reclaimed it
    and the first, waking late, has had its `refused_op` write refused; then stop
    both. Returns the late worker, the other, and the late worker's token."""
    assert site.enqueue(slow)
    late = site.spawn(threads=1, heartbeat_ms=NO_HEARTBEAT)
    site.ledger.wait_for("SELECT count(*) FROM executions")
    other = site.spawn(threads=1, heartbeat_ms=NO_HEARTBEAT)
    late_token = only_token(site, late)
    site.ledger.wait_for(
        "SELECT count(*) FROM writes WHERE token = ? AND op = ? AND NOT ok",
        (late_token, refused_op),
        timeout_s=15,
    )
    stop(late, other)
    return late, other, late_token


def test_a_job_slower_than_its_lease_keeps_it_by_heartbeat_and_runs_once(site: Site) -> None:
    slow = site.job(sleep_ms=2 * LEASE_MS + 500)
    assert site.enqueue(slow)
    holder = site.spawn(threads=1)
    site.ledger.wait_for("SELECT count(*) FROM executions")
    keeper = site.spawn(threads=1)  # its lease keeper looks every LEASE_MS / 2
    token = only_token(site, holder)
    site.ledger.wait_for(
        "SELECT count(*) FROM writes WHERE token = ? AND op = 'finish' AND ok",
        (token,),
        timeout_s=15,
    )
    stop(holder, keeper)

    scans = [w for w in site.ledger.writes() if w.op == "scan" and w.pid == keeper.pid]
    assert len(scans) >= 3 and not any(s.ok for s in scans), "looked, found nothing abandoned"
    assert not [w for w in site.ledger.writes() if w.op == "reclaim"]
    beats = [w for w in site.ledger.writes(token) if w.op == "extend"]
    assert len(beats) >= 4 and all(b.ok for b in beats), "every heartbeat renewed the lease"
    record = site.store.get(slow.id)
    assert record.status is JobStatus.COMPLETED and record.result["token"] == token
    f = site.figures()
    f.assert_no_loss(duplicates_at_most=0)
    assert (f.executions, f.completed) == (1, 1)


def test_without_heartbeats_a_slow_job_is_rerun_and_the_late_holder_cannot_write(
    site: Site,
) -> None:
    slow = site.job(sleep_ms=2 * LEASE_MS, slow_first=True)
    # The original wakes after the other worker reclaimed and completed the job; its
    # fenced finish (record and release in one step) is refused, so it writes nothing.
    _, other, late_token = overtaken(site, slow, "finish")
    other_token = only_token(site, other)
    assert not released(site, late_token)
    assert [w.op for w in site.ledger.writes(late_token) if w.op != "claim"] == [
        "reclaim",
        "finish",
    ], "reclaimed by the other worker, then its own late finish refused; nothing else"

    # Its claim is dead for every fenced write, not only the one the worker tried.
    stale = Claim(job=slow, token=late_token, queue="default", locked_at=datetime.now(UTC))
    assert site.queue.extend(stale, datetime.now(UTC)) is False
    assert site.queue.replace(stale, slow) is False
    assert site.queue.ack(stale) is False

    record = site.store.get(slow.id)
    assert record.status is JobStatus.COMPLETED
    assert record.result["token"] == other_token, "the one outcome that stands is the other's"
    assert site.ledger.effects()[str(slow.id)] == other_token
    assert site.counts() == QueueCounts(), "nothing was put back by the stale writes"
    f = site.figures()
    f.assert_no_loss(duplicates_at_most=1)
    assert (f.executions, f.concurrent, f.overlap) == (2, 1, 0), "ran side by side, one lease"


def test_without_heartbeats_a_late_failure_cannot_schedule_a_retry(site: Site) -> None:
    slow = site.job(sleep_ms=2 * LEASE_MS, slow_first=True, fail_first=True)
    _, other, late_token = overtaken(site, slow, "replace")

    record = site.store.get(slow.id)
    assert record.status is JobStatus.COMPLETED, "the late Retry did not overwrite the outcome"
    assert record.result["token"] == only_token(site, other)
    assert record.retry_count == 0 and record.last_error is None
    assert site.counts() == QueueCounts(), "no retry was parked by the late holder"
    f = site.figures()
    f.assert_no_loss(duplicates_at_most=1)
    assert f.executions == 2


def test_a_worker_frozen_past_its_lease_then_resumed_has_every_write_refused(
    site: Site,
) -> None:
    slow = site.job(sleep_ms=1000, slow_first=True)
    assert site.enqueue(slow)
    frozen = site.spawn(threads=1)
    site.ledger.wait_for("SELECT count(*) FROM executions")
    frozen.signal(signal.SIGSTOP)
    stopped_at = time.time()
    frozen_token = only_token(site, frozen)
    other = site.spawn(threads=1)
    other_token = site.ledger.wait_for(
        "SELECT token FROM writes WHERE op = 'finish' AND ok AND pid = ?",
        (other.pid,),
        timeout_s=15,
    )
    assert time.time() - stopped_at > LEASE_MS / 1000, "the job moved on only after the lease"
    resumed_at = time.time()
    frozen.signal(signal.SIGCONT)
    site.ledger.wait_for(
        "SELECT count(*) FROM executions WHERE ended IS NOT NULL AND pid = ?", (frozen.pid,)
    )
    site.ledger.wait_for(
        "SELECT count(*) FROM writes WHERE token = ? AND op = 'finish' AND NOT ok",
        (frozen_token,),
    )
    stop(frozen, other)

    after = [w for w in site.ledger.writes(frozen_token) if w.at >= resumed_at]
    assert after and not any(w.ok for w in after), f"refused after SIGCONT: {after}"
    assert not released(site, frozen_token)
    record = site.store.get(slow.id)
    assert record.status is JobStatus.COMPLETED and record.result["token"] == other_token
    assert site.ledger.effects()[str(slow.id)] == other_token
    f = site.figures()
    f.assert_no_loss(duplicates_at_most=1)
    assert (f.executions, f.completed, f.overlap) == (2, 1, 0)
