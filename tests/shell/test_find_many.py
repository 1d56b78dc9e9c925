"""`FindingManyJobQueue.find_many` on every backend: the queued jobs of many ids in one
read per batch, as `find` finds each."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

from backends import Backend
from conveyor.shell.ports import Claim, FindingManyJobQueue, Place
from helpers import T0, make_job


def test_find_many_finds_what_find_finds_across_batches(backend: Backend) -> None:
    # What a large workflow's page reads: its members in one read per 500, not each.
    assert isinstance(backend.queue, FindingManyJobQueue)
    ready = [make_job(args={"i": i}) for i in range(520)]
    parked = make_job(run_at=T0 + timedelta(hours=1))
    backend.queue.enqueue_many([*ready, parked])
    claim = backend.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    unknown = uuid4()
    ids = [unknown, parked.id, *[j.id for j in ready], ready[3].id]
    found = backend.queue.find_many(ids)
    expected = {job_id: backend.queue.find(job_id) for job_id in ids}
    assert found == {job_id: entry for job_id, entry in expected.items() if entry is not None}
    assert len(found) == 521 and unknown not in found
    assert found[claim.job.id].place is Place.IN_FLIGHT and found[parked.id].place is Place.SCHEDULED
