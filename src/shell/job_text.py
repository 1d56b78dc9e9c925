"""A job view as text: `conveyor job show`'s lines and `conveyor jobs list`'s rows."""

from __future__ import annotations

import json

from ..core import MAX_ATTEMPTS_KEPT, Attempt, thaw
from .job_view import JobView
from .terminal import clipped


def attempt_line(attempt: Attempt) -> str:
    """One attempt on one line: number, outcome, when it ended, how long it took, the
    worker and the error's type and first line."""
    parts = [f"#{attempt.number} {attempt.outcome.value} at {attempt.finished_at.isoformat()}"]
    if attempt.started_at is not None:
        took = (attempt.finished_at - attempt.started_at).total_seconds()
        parts.append(f"took {took:.3f} s")
    parts.append(f"worker {attempt.worker or 'unknown'}")
    line = ", ".join(parts)
    error = attempt.error
    if error is not None:
        first = clipped(error.message.splitlines()[0], 200) if error.message else ""
        line += f": {error.type}: {first}"
    return line


def progress_text(view: JobView) -> str:
    """A running job's progress on one line: the fraction as a percentage, the value
    as JSON, and when it was reported; empty when it reported none."""
    report = view.progress
    if report is None:
        return ""
    parts = [] if report.fraction is None else [f"{report.fraction * 100:.1f}%"]
    if report.value is not None:
        parts.append(json.dumps(thaw(report.value), ensure_ascii=False))
    parts.append(f"(at {report.at.isoformat()})")
    return " ".join(parts)


def describe(
    view: JobView,
    *,
    show_args: bool = False,
    show_result: bool = False,
    show_traceback: bool = False,
) -> list[str]:
    """`conveyor job show`'s lines: one `field: value` each, for the state at hand,
    then one line per attempt (each followed by its traceback when asked)."""
    data = view.to_dict(show_args=show_args, show_result=show_result)
    state = view.state.value + (" (dead letter)" if view.dead else "")
    lines = [f"id: {view.job_id}", f"state: {state}", f"queue: {view.queue}"]
    job = view.job
    if job is None:
        return [*lines, f"problem: the stored payload is not a job: {view.problem}"]
    lines += [
        f"job type: {job.job_type}",
        f"priority: {job.priority.value}",
        f"tenant: {job.tenant_id or '-'}",
        f"attempt: {view.attempt} (retries {job.retry_count} of {job.max_retries})",
        f"created at: {data['created_at']}",
    ]
    if job.timeout_ms is not None:
        lines.append(f"timeout: {job.timeout_ms / 1000:g} s per attempt")
    if view.next_run_at is not None:
        lines.append(f"next run at: {data['next_run_at']}")
    if view.token is not None:
        claim = data["claim"]
        waiting = " (in a prefetched batch)" if view.prefetched else ""
        lines += [
            f"claim token: {view.token}{waiting}",
            f"claimed or renewed at: {claim['claimed_at']}",
            f"lease expires at: {claim['lease_expires_at']}",
        ]
        if view.cancel_requested:
            lines.append("cancel: requested (recorded cancelled when the handler returns)")
        if view.progress is not None:
            lines.append(f"progress: {progress_text(view)}")
    if job.started_at is not None:
        lines.append(f"started at: {data['started_at']}")
    if job.finished_at is not None:
        lines.append(f"finished at: {data['finished_at']}")
    if job.last_error is not None:
        error = job.last_error
        lines.append(f"last error: {error.type}: {error.message}")
    lines += _attempt_lines(job.attempts, show_traceback)
    if show_args:
        lines.append(f"args: {json.dumps(data['args'], default=str, ensure_ascii=False)}")
    if show_result:
        lines.append(f"result: {json.dumps(data['result'], default=str, ensure_ascii=False)}")
    elif job.result is not None:
        lines.append("result: hidden (--show-result shows it)")
    return lines


def _attempt_lines(attempts: tuple[Attempt, ...], show_traceback: bool) -> list[str]:
    if not attempts:
        return ["attempts: none finished"]
    kept = f"the newest {MAX_ATTEMPTS_KEPT}, " if len(attempts) >= MAX_ATTEMPTS_KEPT else ""
    lines = [f"attempts ({kept}oldest first):"]
    traced = False
    for attempt in attempts:
        lines.append(f"  {attempt_line(attempt)}")
        trace = None if attempt.error is None else attempt.error.traceback
        traced = traced or trace is not None
        if show_traceback and trace is not None:
            lines += [f"    {line}" for line in trace.rstrip("\n").splitlines()]
    if traced and not show_traceback:
        lines.append("tracebacks: hidden (--traceback shows them)")
    return lines


def summary_row(view: JobView) -> tuple[object, ...]:
    """One row of `conveyor jobs list`."""
    job = view.job
    note: str | None
    if view.token is not None and view.lease_expires_at is not None:
        note = f"lease until {view.lease_expires_at.isoformat(timespec='seconds')}"
    elif view.next_run_at is not None:
        note = f"due {view.next_run_at.isoformat(timespec='seconds')}"
    elif job is not None and job.last_error is not None and view.state.is_terminal:
        note = f"{job.last_error.type}: {clipped(job.last_error.message, 60)}"
    else:
        note = view.problem
    return (
        view.job_id,
        view.state.value,
        view.queue,
        None if job is None else job.job_type,
        None if job is None else job.priority.value,
        None if job is None else view.attempt,
        note,
    )


#: The columns of `summary_row`.
SUMMARY_HEADERS = ("id", "state", "queue", "job type", "priority", "attempt", "note")
