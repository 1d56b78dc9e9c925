"""The queue machine's rules that add work: enqueue ready and parked jobs, first
writes under a fresh or a known id, and promotion of due jobs."""

from __future__ import annotations

import attrs
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ...core import Priority
from .model import QUEUES, ModelMachine


class EnqueueRules(ModelMachine):
    @rule(queue=st.sampled_from(QUEUES), priority=st.sampled_from(list(Priority)))
    def enqueue_ready(self, queue: str, priority: Priority) -> None:
        job = self._new_job(queue, priority, 0)
        note(f"enqueue {job.id.int} {queue} {priority.value}")
        self.queue.enqueue(job)
        self.jobs[job.id] = job
        self._to_ready(job.id, priority)

    @rule(queue=st.sampled_from(QUEUES), priority=st.sampled_from(list(Priority)))
    def enqueue_new_with_a_fresh_id_places_it(self, queue: str, priority: Priority) -> None:
        job = self._new_job(queue, priority, 0)
        note(f"enqueue_new {job.id.int} {queue} {priority.value}")
        assert self.queue.enqueue_new(job) is None, "a fresh id was taken for a known one"
        self.jobs[job.id] = job
        self._to_ready(job.id, priority)

    @precondition(lambda self: bool(self._known()))
    @rule(data=st.data(), delay_ms=st.sampled_from([0, 500]))
    def enqueue_new_with_a_known_id_returns_the_job_there(
        self, data: st.DataObject, delay_ms: int
    ) -> None:
        """A second job under a known id writes nothing, in any state: the one there
        comes back with its own args, and its place in the queue is unchanged."""
        i = data.draw(st.sampled_from(self._known()))
        known = self.jobs[i]
        elsewhere = QUEUES[1] if known.queue == QUEUES[0] else QUEUES[0]
        other = attrs.evolve(self._new_job(elsewhere, Priority.CRITICAL, delay_ms), id=i)
        note(f"enqueue_new again {i.int}")
        there = self.queue.enqueue_new(other)
        assert there is not None, "a job was written over a known id"
        assert there.id == i and there.args == known.args, "a known job's args were replaced"

    @rule(
        queue=st.sampled_from(QUEUES),
        priority=st.sampled_from(list(Priority)),
        delay=st.integers(1, 3000),
    )
    def enqueue_scheduled(self, queue: str, priority: Priority, delay: int) -> None:
        job = self._new_job(queue, priority, delay)
        note(f"schedule {job.id.int} {queue} +{delay}ms")
        self.queue.enqueue(job)
        self.jobs[job.id] = job
        self._park(job)

    @rule()
    def promote(self) -> None:
        moved = self.queue.promote_due(self.now)
        due = self._promote_model(None)
        note(f"promote -> {moved} (model {due})")
        assert moved == due
