"""A contract case: a named scenario over the ports, run on one `Subject`, and the
capabilities it needs."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import attrs

from .subject import Need, Subject


@attrs.frozen
class Case:
    """One behaviour every adapter must show: `run(subject)` raises (an
    `AssertionError`, usually) when the subject does not. `needs` are the
    capabilities and hooks it takes from the subject."""

    name: str
    run: Callable[[Subject], None] = attrs.field(eq=False, repr=False)
    needs: tuple[Need, ...] = ()
    doc: str = attrs.field(default="", eq=False, repr=False)

    def __call__(self, subject: Subject) -> None:
        self.run(subject)

    def missing(self, subject: Subject) -> list[str]:
        """What the case needs and `subject` lacks (empty when it applies)."""
        return [need.label for need in self.needs if not need.holds(subject)]


def case(*needs: Need) -> Callable[[Callable[[Subject], None]], Case]:
    """Make the decorated function a `Case` named after it, needing `needs`."""

    def make(run: Callable[[Subject], None]) -> Case:
        return Case(run.__name__, run, needs, inspect.getdoc(run) or "")

    return make
