"""Cases of the operator's reads and writes: where a queued job is (`find`, `scan`,
`find_many`) and how finished records go (`prune`).
"""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from ....core import ErrorInfo, Policies, Succeeded, dead_letter, decide, start
from ....shell.ports import Claim, Place
from ..case import case
from ..subject import FINDING_MANY, FINISHING, Subject
from ..support import T0, make_job, prune_order


@case()
def find_and_scan_report_where_each_job_is(s: Subject) -> None:
    ready, parked, held = make_job(), make_job(delay=timedelta(minutes=1)), make_job()
    for job in (held, ready, parked):
        s.queue.enqueue(job)
    claim = s.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and claim.job.id == held.id
    found = {job.id: s.queue.find(job.id) for job in (ready, parked, held)}
    assert {i: f.place for i, f in found.items() if f} == {
        ready.id: Place.READY,
        parked.id: Place.SCHEDULED,
        held.id: Place.IN_FLIGHT,
    }
    assert found[held.id].token == claim.token
    assert [q.job_id for q in s.queue.scan()] == [str(held.id), str(ready.id), str(parked.id)]
    assert s.queue.ack(claim)
    assert s.queue.find(held.id) is None


@case(FINDING_MANY)
def find_many_finds_what_find_finds(s: Subject) -> None:
    """A workflow's members are read in one read, not each on its own: the same answer."""
    ready, parked, held = make_job(), make_job(delay=timedelta(minutes=1)), make_job()
    for job in (held, ready, parked):
        s.queue.enqueue(job)
    claim = s.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    ids = [uuid4(), ready.id, parked.id, held.id, ready.id]
    found = s.queue.find_many(ids)
    assert found == {job.id: s.queue.find(job.id) for job in (ready, parked, held)}
    assert s.queue.ack(claim)
    assert held.id not in s.queue.find_many([held.id])


@case(FINISHING)
def prune_deletes_only_old_finished_records(s: Subject) -> None:
    old, recent, dead = make_job(), make_job(), make_job()
    for job in (old, recent, dead):
        s.queue.enqueue(job)
    finished = {}
    for when, job in ((T0, old), (T0 + timedelta(days=10), recent), (T0, dead)):
        claim = s.queue.dequeue("default", when)
        assert isinstance(claim, Claim) and claim.job.id == job.id
        running = start(claim.job, when).unwrap()
        if job is dead:
            record = dead_letter(running, ErrorInfo("Boom", "no", False), when).job
        else:
            record = decide(running, Succeeded(1), when, Policies(), 0.5).job
        assert s.queue.finish(claim, record)
        finished[job.id] = record
    cut = T0 + timedelta(days=1)
    order = prune_order(completed_before=cut)
    assert s.store.count_prunable(order) == 1
    assert s.store.prune(order) == 1
    assert s.store.get(old.id) is None
    assert s.store.get(recent.id) == finished[recent.id]
    assert s.store.get(dead.id) == finished[dead.id], "dead letters have their own cutoff"
    assert s.store.prune(order) == 0


OPERATION_CASES = (find_and_scan_report_where_each_job_is, prune_deletes_only_old_finished_records)
