"""Sweep cases for bulk enqueue (`enqueue_many`): each job of the list is placed as
`enqueue` would place it, on every backend, whatever the bulk path (COPY on
PostgreSQL, one statement on SQLite, one script on Redis).
"""

from __future__ import annotations

from datetime import timedelta

import attrs
from backends import Backend
from conveyor.shell.ports import Claim
from helpers import T0, make_job


def bulk_enqueue_takes_a_claimed_job_from_its_holder(b: Backend) -> None:
    held, fresh = make_job(args={"v": 1}), make_job()
    b.queue.enqueue(held)
    claim = b.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and claim.job.id == held.id
    b.queue.enqueue_many([attrs.evolve(held, args={"v": 2}), fresh])
    assert b.queue.ack(claim) is False, "the holder's claim went with the re-enqueue"
    taken = b.queue.dequeue_many("default", T0, 10)
    assert [(c.job.id, c.job.args) for c in taken if isinstance(c, Claim)] == [
        (held.id, {"v": 2}),
        (fresh.id, {}),
    ]


def parked_jobs_of_a_bulk_enqueue_come_due_in_list_order(b: Backend) -> None:
    later = timedelta(seconds=30)
    parked = [make_job(args={"i": i}, delay=later) for i in range(4)]
    b.queue.enqueue_many([parked[2], parked[0], parked[3], parked[1]])
    assert b.queue.dequeue("default", T0) is None, "none is due yet"
    taken = b.queue.dequeue_many("default", T0 + later, 10)
    assert [c.job.args["i"] for c in taken if isinstance(c, Claim)] == [2, 0, 3, 1]


BULK_CASES = (
    bulk_enqueue_takes_a_claimed_job_from_its_holder,
    parked_jobs_of_a_bulk_enqueue_come_due_in_list_order,
)
