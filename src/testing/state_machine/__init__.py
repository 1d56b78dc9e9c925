"""A reusable model check for `JobQueue` adapters.

`queue_machine(factory)` returns a hypothesis `RuleBasedStateMachine` that runs
random sequences of enqueue, dequeue (which promotes due jobs itself), batched
claim, start of a prefetched claim, ack, stale ack, extend, replace, schedule,
promote, reclaim, batched finish, the lease keeper's poison-pill write racing a
renewal, an operator's revive, the cancel of a queued or a held job, and a claim
under caps (for a `LimitedJobQueue`: per partition and for the queue), jobs that
wait for other jobs (for a `WorkflowJobQueue`: enqueued after any job, under each
failure policy, released, worked, cancelled while waiting), against
the adapter and against a model simpler than any adapter: a dict of where each job
is. Write your own adapter, hand its factory to this machine, and it is held to the
same contract as the built-in ones::

    TestMyQueue = queue_machine(lambda: (MyQueue(...), lambda: None)).TestCase

A factory may also return the store the queue finishes into, as a third item;
then the finishing rules (batched finish, guarded dead letter, revive) run too.

The model and the machine's base are in `model`; the rules, by area, in
`enqueue_rules`, `claim_rules`, `holder_rules`, `finish_rules` and `workflow_rules`;
`machine` puts
them together.
"""

from __future__ import annotations

from .machine import queue_machine
from .model import CAPS, LEASE_MS, PARTITIONS, QUEUES, START, Factory

__all__ = ["CAPS", "LEASE_MS", "PARTITIONS", "QUEUES", "START", "Factory", "queue_machine"]
