"""An attempt as a value: what running one claimed job gave, passed on to be decided,
written and reported.

A worker runs a claimed job's handler and gets an `Attempted`: the claim it ran
under (after a `StartClaim`, the started one), the job as started, the handler's
outcome, the exception behind a failure, and whether the attempt was cut off at
its deadline. The core decides from it, the executor writes the decision under
its claim, and the report (counters, failure log, hooks) reads the rest: nothing
about an attempt is parked aside and looked up again later.

An `async def` handler is not awaited by the worker's thread: its attempt is
`Awaiting` until the event loop finishes it, and then it is an `Attempted` like
any other.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import attrs

from ...core import ErrorInfo, Failed, Job, Outcome
from ..ports import Claim


@attrs.frozen(slots=True)
class Attempted:
    """One attempt of a claimed job, run to its outcome."""

    #: The claim the attempt ran under: its outcome is written under this one.
    claim: Claim
    #: The job as started (running, its attempt counted).
    job: Job
    outcome: Outcome
    #: The exception behind a failed outcome (raised, or returned in a `Failure`).
    exception: BaseException | None = None
    #: The attempt ran past its timeout and was recorded as a `Timeout` failure.
    timed_out: bool = False

    @property
    def error(self) -> ErrorInfo | None:
        """The failure's description, or None when the attempt did not fail."""
        outcome = self.outcome
        return outcome.error if isinstance(outcome, Failed) else None


@attrs.frozen(slots=True)
class Awaiting:
    """An attempt whose handler is async: its awaitable, to run on the event loop
    (bounded by `timeout_ms`), and to be decided once it finishes."""

    claim: Claim
    job: Job
    awaitable: Awaitable[Any]
    timeout_ms: int | None
