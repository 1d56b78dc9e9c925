"""Sweep cases for the operator's reads and writes: where a queued job is (`find`,
`scan`) and how finished records go (`prune`). Each runs on every backend through
`test_adapter_surface.py`, as every `JobQueue` / `JobStore` operation does.
"""

from __future__ import annotations

from datetime import timedelta

from backends import Backend
from conveyor.core import ErrorInfo, Policies, Succeeded, dead_letter, decide, start
from conveyor.core.retention import PruneOrder
from conveyor.shell.ports import Claim, Place
from helpers import T0, make_job


def find_and_scan_report_where_each_job_is(b: Backend) -> None:
    ready, parked, held = make_job(), make_job(delay=timedelta(minutes=1)), make_job()
    for job in (held, ready, parked):
        b.queue.enqueue(job)
    claim = b.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and claim.job.id == held.id
    found = {job.id: b.queue.find(job.id) for job in (ready, parked, held)}
    assert {i: f.place for i, f in found.items() if f} == {
        ready.id: Place.READY,
        parked.id: Place.SCHEDULED,
        held.id: Place.IN_FLIGHT,
    }
    assert found[held.id].token == claim.token
    assert [q.job_id for q in b.queue.scan()] == [str(held.id), str(ready.id), str(parked.id)]
    assert b.queue.ack(claim)
    assert b.queue.find(held.id) is None


def prune_deletes_only_old_finished_records(b: Backend) -> None:
    old, recent, dead = make_job(), make_job(), make_job()
    for job in (old, recent, dead):
        b.queue.enqueue(job)
    finished = {}
    for when, job in ((T0, old), (T0 + timedelta(days=10), recent), (T0, dead)):
        claim = b.queue.dequeue("default", when)
        assert isinstance(claim, Claim) and claim.job.id == job.id
        running = start(claim.job, when).unwrap()
        if job is dead:
            record = dead_letter(running, ErrorInfo("Boom", "no", False), when).job
        else:
            record = decide(running, Succeeded(1), when, Policies(), 0.5).job
        assert b.queue.finish(claim, record)
        finished[job.id] = record
    cut = T0 + timedelta(days=1)
    order = PruneOrder(
        completed_before=cut, dead_before=None, keep_completed=None, keep_dead=None, limit=10
    )
    assert b.store.count_prunable(order) == 1
    assert b.store.prune(order) == 1
    assert b.store.get(old.id) is None
    assert b.store.get(recent.id) == finished[recent.id]
    assert b.store.get(dead.id) == finished[dead.id], "dead letters have their own cutoff"
    assert b.store.prune(order) == 0


OPERATION_CASES = (find_and_scan_report_where_each_job_is, prune_deletes_only_old_finished_records)
