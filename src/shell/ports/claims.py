"""Claims: a job taken by one worker, and a claimed payload that is not a job.

Every write a claim holder makes is fenced by the claim's token: a holder whose
lease expired and whose job was claimed again cannot ack, extend or replace it.
"""

from __future__ import annotations

from datetime import datetime

import attrs

from ...core import Job


@attrs.frozen(slots=True)
class Claim:
    """A job taken by one worker. `token` is fresh for every claim, never a worker name."""

    job: Job
    token: str
    queue: str
    locked_at: datetime

    @property
    def started(self) -> bool:
        """False for a prefetched claim whose job has not begun (see `prefetch_token`):
        reclaiming it charges nothing to the job's reclaim budget."""
        return not is_prefetched(self.token)


#: Tokens of prefetched claims (from `dequeue_many`) begin with this mark; a single
#: `dequeue`, and `start_claim`, give plain tokens. The mark is stored with the claim,
#: so the lease keeper of any process can tell a started claim from one that waited.
PREFETCH_MARK = "p-"


def prefetch_token(base: str) -> str:
    """The token of a prefetched (not yet started) claim built from `base`."""
    return PREFETCH_MARK + base


def is_prefetched(token: str) -> bool:
    """True when `token` belongs to a claim whose job has not started."""
    return token.startswith(PREFETCH_MARK)


@attrs.frozen(slots=True)
class BadClaim:
    """A claimed payload that is not a job (malformed, foreign, forged, pickled).

    It is claimed like any job so exactly one worker deals with it; the worker
    dead-letters it as `decode-error`. Nothing in it is ever imported or unpickled.
    """

    job_id: str
    token: str
    queue: str
    payload: str = attrs.field(repr=False)  # may hold secrets; never shown
    reason: str
    locked_at: datetime
