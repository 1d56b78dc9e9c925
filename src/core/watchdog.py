"""Whether a worker process is live, and whether it is ready to claim.

A worker loop can stop making progress without dying: a server connection that
hangs half-open (no reply, no error), a reconnect that never succeeds, a process
stopped by SIGSTOP. Its claims then return to ready with their leases, but the
process goes on looking alive to whatever supervises it, and claims nothing more.
The watchdog tells this apart from a worker that is merely idle or busy.

A loop progresses when a server round trip of its own answers: a claim (whether
it took jobs or found none due), a wait for work that returned, or, while one of
its handlers runs, a lease renewal of that running claim (the loop is then busy in
the handler, and its leases being kept is what shows it well). A loop that chose to
wait (an idle poll with nothing due, a claim held back by the queue's rates) is not
expected to progress before its wait ends. So a loop is stalled once
`stall_leases` whole leases have passed since the later of its last progress and
the end of its planned wait, or since it started when it has not yet progressed:
an idle worker is never stalled, and a worker whose queue has due work that it
cannot claim is stalled within `stall_leases` leases. By then its own claims have
already gone back to the queue.

The shell records the times (a monotonic clock, in seconds) and serves the answer
at `/healthz` and `/readyz`; this decides.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .field_checks import integer_at_least

#: Leases without progress before a loop counts as stalled, unless configured.
DEFAULT_STALL_LEASES = 3


@attrs.frozen(slots=True)
class StallPolicy:
    """A loop is stalled after `stall_leases` leases of `lease_ms` without progress;
    `stall_leases = 0` turns the watchdog off (a loop is then never stalled)."""

    lease_ms: int = attrs.field(validator=integer_at_least(1))
    stall_leases: int = attrs.field(default=DEFAULT_STALL_LEASES, validator=integer_at_least(0))

    @property
    def enabled(self) -> bool:
        return self.stall_leases > 0

    @property
    def limit_s(self) -> float:
        """How long a loop may go without progress, in seconds (0 when off)."""
        return self.stall_leases * self.lease_ms / 1000


@attrs.frozen(slots=True)
class LoopMarks:
    """What one worker loop last did, as monotonic times in seconds."""

    #: When the loop was started.
    started_s: float
    #: Its last progress; None until its first server round trip answered.
    progressed_s: float | None = None
    #: The end of the wait it last chose (idle, or held back); None if it never waited.
    waiting_until_s: float | None = None
    #: It was asked to stop: it claims nothing more.
    stopping: bool = False


@attrs.frozen(slots=True)
class Health:
    """The process's answer: `live` for `/healthz`, `ready` for `/readyz`, and a
    `reason` an operator can read either way."""

    live: bool
    ready: bool
    reason: str


def stall_reason(policy: StallPolicy, marks: LoopMarks, now_s: float) -> str | None:
    """Why the loop counts as stalled at `now_s`, in words, or None while it does not."""
    if not policy.enabled:
        return None
    since = max(
        s for s in (marks.started_s, marks.progressed_s, marks.waiting_until_s) if s is not None
    )
    quiet = now_s - since
    if quiet <= policy.limit_s:
        return None
    limit = f"{policy.stall_leases} leases of {policy.lease_ms / 1000:g} s"
    if marks.progressed_s is None:
        return f"no answer from the server in {quiet:.0f} s since the start ({limit})"
    return (
        f"no progress for {quiet:.0f} s: no claim, no wait for work and no lease renewal "
        f"answered ({limit})"
    )


def assess(
    policy: StallPolicy, loops: Sequence[LoopMarks], now_s: float, *, server_down: bool
) -> Health:
    """The health of a process whose worker loops are `loops`. Not live once any
    loop is stalled (a process whose other loops still progress is replaced all the
    same: its stalled loop holds nothing a fresh process needs). Ready when it runs
    loops, none of them stopping, each one has reached the server, and the server
    was not found away at the last try."""
    for index, marks in enumerate(loops):
        reason = stall_reason(policy, marks, now_s)
        if reason is not None:
            return Health(False, False, f"stalled: worker loop {index}: {reason}")
    if not loops:
        return Health(True, False, "no worker loop is running (not started, or stopped)")
    if any(marks.stopping for marks in loops):
        return Health(True, False, "stopping: finishing running jobs, claiming nothing more")
    if any(marks.progressed_s is None for marks in loops):
        return Health(True, False, "starting: not every worker loop has reached the server")
    if server_down:
        return Health(True, False, "the server is unreachable: reconnecting")
    return Health(True, True, "claiming")
