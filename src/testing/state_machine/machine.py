"""`queue_machine`: the queue machine for one adapter, its rules gathered from every
area (see the package's docstring)."""

from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine

from .claim_rules import ClaimRules
from .enqueue_rules import EnqueueRules
from .finish_rules import FinishRules
from .holder_rules import HolderRules
from .model import Factory
from .workflow_rules import WorkflowRules


def queue_machine(factory: Factory, *, max_examples: int = 40) -> type[RuleBasedStateMachine]:
    """A state machine class checking the adapter built by `factory` against the model.

    `factory()` returns a fresh, empty queue and a cleanup callable.
    """

    class QueueMachine(EnqueueRules, ClaimRules, HolderRules, FinishRules, WorkflowRules):
        def __init__(self) -> None:
            super().__init__(factory())

    QueueMachine.TestCase.settings = settings(
        max_examples=max_examples, stateful_step_count=30, deadline=None
    )
    return QueueMachine
