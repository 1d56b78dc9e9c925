"""The job context: what a handler may know about the attempt it is running.

A handler that takes a second positional parameter receives a `JobContext`::

    def export(args, ctx):
        for chunk in chunks(args["table"]):
            if ctx.should_stop():  # cancelled, or past its deadline
                return {"stopped_at": chunk.id}
            write(chunk)

The context is frozen: reading it has no effect on the job. Its checks are
cheap calls the worker supplies; `cancel_requested()` asks whether someone
asked for the job to be cancelled, `timed_out()` whether the worker has given
up on this attempt because it ran past its deadline (see `conveyor.shell.worker.timeouts`).
`progress(fraction, value)` reports how far the handler has come (docs/results.md).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import attrs

from ..core import progress
from .inputs import NO_INPUTS, Inputs


def _never() -> bool:
    return False


def _no_inputs() -> Inputs:
    return NO_INPUTS


def check_progress(fraction: object, value: object) -> None:
    """Where no worker keeps progress (a child process, a context built by hand): the
    report is checked, as a worker checks it, and dropped."""
    progress(fraction, value, datetime.now(UTC))


@attrs.frozen(slots=True)
class JobContext:
    """The attempt a handler is running.

    `attempt` counts from 1 (the first run) and includes retries; `deadline` is
    when the attempt's timeout runs out, by the worker's clock, or None when no
    timeout applies; `tenant_id` is the job's tenant, if it has one.
    """

    job_id: UUID
    job_type: str
    attempt: int
    queue: str
    tenant_id: str | None = None
    deadline: datetime | None = None
    #: Whether cancellation of the job was requested; cheap enough to call in a loop.
    cancel_check: Callable[[], bool] = attrs.field(default=_never, repr=False, eq=False)
    #: Whether the worker gave up on this attempt at its deadline.
    timeout_check: Callable[[], bool] = attrs.field(default=_never, repr=False, eq=False)
    #: Takes a progress report (fraction, value) for the worker to write.
    progress_sink: Callable[[object, object], None] = attrs.field(
        default=check_progress, repr=False, eq=False
    )
    #: Reads the results of the jobs this one waited for (`conveyor.shell.inputs`).
    inputs_reader: Callable[[], Inputs] = attrs.field(default=_no_inputs, repr=False, eq=False)

    def inputs(self) -> Inputs:
        """The results of the jobs this job waited for (docs/workflows.md): by their
        name in the workflow (`ctx.inputs()["fetch"]`) or by id; empty for a job that
        waited for nothing. One read of the store per call."""
        return self.inputs_reader()

    def progress(self, fraction: float | None = None, value: Any = None) -> None:
        """Report how far the attempt has come: `fraction` done (a number from 0 to 1)
        and/or a small JSON `value` (at most `conveyor.core.MAX_PROGRESS_BYTES` as
        JSON), e.g. `ctx.progress(0.4, {"rows": 4000})`. Cheap to call often: only
        the newest report is kept, and the worker writes it with the claim's lease
        renewal, at most one write more per heartbeat interval however often it is
        called. `runtime.get(job_id).progress` shows it while the job runs. A bad
        report raises `ValidationError` naming `fraction` or `value`."""
        self.progress_sink(fraction, value)

    def cancel_requested(self) -> bool:
        """True once cancellation of this job has been requested."""
        return self.cancel_check()

    def timed_out(self) -> bool:
        """True once the worker has recorded this attempt as a `Timeout` failure: its
        result will be discarded, so the handler may as well stop."""
        return self.timeout_check()

    def should_stop(self) -> bool:
        """True when the handler's work is no longer wanted: cancelled or timed out."""
        return self.timed_out() or self.cancel_requested()
