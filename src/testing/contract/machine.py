"""The hypothesis state machine (`conveyor.testing.state_machine`) for a subject
factory: random sequences of every queue operation, checked against a model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis.stateful import RuleBasedStateMachine

from ..state_machine import queue_machine
from .subject import Subject


def state_machine(
    factory: Callable[[], Subject], *, max_examples: int = 40
) -> type[RuleBasedStateMachine]:
    """The queue machine over fresh subjects from `factory()`: its `TestCase` is a
    unittest case pytest collects. Each example gets its own subject, cleaned up at the
    machine's teardown; the finishing rules run because the subject names its store."""

    def made() -> tuple[Any, ...]:
        subject = factory()
        return subject.queue, subject.cleanup, subject.store

    return queue_machine(made, max_examples=max_examples)
