"""Unique jobs and caller-chosen ids: when an enqueue finds its job already there.

Theory of operation. A caller may name the job (`id`) or give it a unique key.

* An id names one job for ever: an enqueue whose id is already stored, in any
  state (queued, running, finished, dead), writes nothing and answers with the
  stored job. Its args are never replaced.
* A unique key is a lock the job holds (a `UniqueLock`): while the holder is in
  one of the lock's `states`, and until its `expires_at` when it has one, an
  enqueue with the same key writes nothing and answers with the holder. Once the
  holder has left those states (it finished, was dead-lettered or cancelled, or its
  record was pruned), or the lock expired, the next enqueue with the key takes the
  lock over. Nothing has to remember to release a lock: the verdict reads the
  holder's state at the moment of the enqueue.

The lock's `states` and `expires_at` are the holder's, fixed when it was enqueued.
By default the states are the unfinished ones (`DEFAULT_UNIQUE_STATES`); adding
`completed` keeps the key for a finished job too, which with `unique_for` means
"at most one run per window".

This module is the policy, as data and pure functions. The adapters read the
holder's state and apply `lock_holds` in the same atomic step as the enqueue (one
transaction on SQL, one Lua script on Redis, one lock in memory), so of several
concurrent enqueuers of one key exactly one writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from .errors import FieldError
from .job import JobStatus, UniqueLock
from .times import as_delay, later

#: The states in which a job keeps its unique key by default: every unfinished one.
DEFAULT_UNIQUE_STATES: tuple[JobStatus, ...] = (
    JobStatus.SCHEDULED,
    JobStatus.WAITING,
    JobStatus.PENDING,
    JobStatus.RUNNING,
    JobStatus.RETRYING,
)

#: The longest unique key, in characters (it lands in a primary key and a Redis key).
MAX_UNIQUE_KEY_CHARS = 200

__all__ = [
    "DEFAULT_UNIQUE_STATES",
    "MAX_UNIQUE_KEY_CHARS",
    "UniqueLock",
    "lock_holds",
    "make_lock",
    "state_names",
]


def lock_holds(lock: UniqueLock, holder: JobStatus | None, now: datetime) -> bool:
    """True while `lock` keeps its key from a new job: its holder (`holder` is the
    holder's state now, None when no queue or store has it) is in one of the lock's
    states and the lock has not expired."""
    if holder is None or holder not in lock.states:
        return False
    return lock.expires_at is None or now < lock.expires_at


def state_names(lock: UniqueLock) -> str:
    """The lock's states as the adapters store them: their names, comma-separated."""
    return ",".join(state.value for state in lock.states)


def _parse_states(value: object) -> tuple[JobStatus, ...] | FieldError:
    field = "unique_states"
    if isinstance(value, str | JobStatus) or not isinstance(value, Iterable):
        return FieldError(field, "must be a list of job states, such as ['pending', 'running']")
    states: list[JobStatus] = []
    for item in value:
        if isinstance(item, JobStatus):
            states.append(item)
            continue
        try:
            states.append(JobStatus(item))
        except ValueError:
            names = ", ".join(s.value for s in JobStatus)
            return FieldError(field, f"unknown state {item!r}; use some of {names}")
    if not states:
        return FieldError(field, "must name at least one state")
    return tuple(states)


def _check_key(value: object) -> str | FieldError:
    field = "unique_key"
    if not isinstance(value, str):
        return FieldError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        return FieldError(field, "must not be empty")
    if len(value) > MAX_UNIQUE_KEY_CHARS:
        return FieldError(field, f"is {len(value)} characters; the limit is {MAX_UNIQUE_KEY_CHARS}")
    if not value.isprintable():
        return FieldError(field, "must not hold control characters or lone surrogates")
    return value


def make_lock(
    key: object,
    now: datetime,
    unique_for: timedelta | float | None = None,
    unique_states: Iterable[JobStatus | str] | None = None,
) -> UniqueLock | FieldError | None:
    """The lock a job enqueued at `now` holds, from the enqueue options: None when
    no `key` is given (then neither option may be), or why an option is wrong.

    `unique_for` (seconds or a timedelta, more than zero) bounds the lock to that
    long after `now`; `unique_states` (states or their names) replaces
    `DEFAULT_UNIQUE_STATES`.
    """
    if key is None:
        for field, given in (("unique_for", unique_for), ("unique_states", unique_states)):
            if given is not None:
                return FieldError(field, "needs unique_key: it shapes the key's lock")
        return None
    checked = _check_key(key)
    if isinstance(checked, FieldError):
        return checked
    states = DEFAULT_UNIQUE_STATES
    if unique_states is not None:
        parsed = _parse_states(unique_states)
        if isinstance(parsed, FieldError):
            return parsed
        states = parsed
    expires_at = None
    if unique_for is not None:
        span = as_delay("unique_for", unique_for)
        if isinstance(span, FieldError):
            return span
        if span <= timedelta(0):
            return FieldError("unique_for", "must be more than zero")
        end = later("unique_for", now, span)
        if isinstance(end, FieldError):
            return end
        expires_at = end
    return UniqueLock(checked, states, expires_at)
