"""Cases of periodic jobs: what the cron ticker relies on from every backend.

A slot's job id is the same on every node (`slot_id`), and each node enqueues it
with `enqueue_new`. However many nodes do, and whenever they do (before the job
runs, while it runs, after it finished), the backend holds one job for the slot.
"""

from __future__ import annotations

from datetime import timedelta

from ....core import JobStatus, Policies, Succeeded, decide, slot_id, start
from ....shell.ports import Claim
from ..case import case
from ..subject import FINISHING, Subject
from ..support import T0, make_job


@case(FINISHING)
def a_cron_slot_is_written_once_before_during_and_after_its_run(s: Subject) -> None:
    other = s.peer()[0] if s.peer is not None else s.queue
    slot = T0.replace(second=0) + timedelta(minutes=1)
    nodes = [
        make_job("report", now=T0 + timedelta(milliseconds=n), id=slot_id("nightly", slot))
        for n in range(3)
    ]
    assert s.queue.enqueue_new(nodes[0]) is None, "the first node writes the slot's job"
    waiting = other.enqueue_new(nodes[1])
    assert waiting is not None and waiting.created_at == nodes[0].created_at
    claim = s.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and claim.job.id == nodes[0].id
    running = other.enqueue_new(nodes[2])
    assert running is not None and running.created_at == nodes[0].created_at
    done = decide(start(claim.job, T0).unwrap(), Succeeded("ok"), T0, Policies(), 0.5).job
    assert s.queue.finish(claim, done)
    late = other.enqueue_new(nodes[2])
    assert late is not None and late.status is JobStatus.COMPLETED
    assert s.queue.dequeue("default", T0 + timedelta(minutes=5)) is None, "nothing ran twice"


CRON_CASES = (a_cron_slot_is_written_once_before_during_and_after_its_run,)
