"""Failures that are part of the domain, carried in `returns.Failure` values."""

from __future__ import annotations

import attrs


@attrs.frozen(slots=True)
class FieldError:
    """One rejected field: which one, and why."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class ValidationError(ValueError):
    """Bad input at the edge. Names every rejected field and the reason.

    The core returns it inside a `Failure`; the public convenience API raises it.
    """

    def __init__(self, errors: tuple[FieldError, ...] | list[FieldError]) -> None:
        self.errors: tuple[FieldError, ...] = tuple(errors)
        super().__init__("; ".join(str(e) for e in self.errors) or "invalid input")

    @classmethod
    def of(cls, field: str, reason: str) -> ValidationError:
        return cls((FieldError(field, reason),))

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(e.field for e in self.errors)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ValidationError) and other.errors == self.errors

    def __hash__(self) -> int:
        return hash(self.errors)


@attrs.frozen(slots=True)
class InvalidTransition:
    """A move the transition table does not allow (for example completed -> running)."""

    job_id: str
    status: str
    event: str

    def __str__(self) -> str:
        return f"job {self.job_id}: no move from {self.status!r} on {self.event!r}"
