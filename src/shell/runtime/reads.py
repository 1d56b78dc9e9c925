"""Reading jobs: one by id in whatever state it is in, a filtered listing, the dead
letters (`ReadMethods`, mixed into `Runtime`; the reads are `conveyor.shell.lookup`'s).

A job id is a UUID or its text, and a state a `JobStatus` or its name (`dead` for
`failed`); a malformed one is a `ValidationError` naming the field, before any
backend is asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from uuid import UUID

from ...core import Job, JobStatus, Policies, ValidationError
from ...core.errors import FieldError
from ...core.validation import check_name, parse_job_id
from ..lookup import JobView, find_job, list_jobs, parse_state
from ..ports import JobQueue, JobStore, PruneRememberingStore


def as_job_id(value: UUID | str, field: str = "job_id") -> UUID:
    """`value` as a job (or workflow) id; a `ValidationError` naming `field` when it is
    not one."""
    parsed = parse_job_id(value, field)
    if isinstance(parsed, FieldError):
        raise ValidationError((parsed,))
    return parsed


def as_state(value: JobStatus | str | None) -> JobStatus | None:
    """`value` as a job state (a name may be `dead` for `failed`); a `ValidationError`
    naming `state` when it names none."""
    if not isinstance(value, str):
        return value
    parsed = parse_state(value)
    if isinstance(parsed, FieldError):
        raise ValidationError((parsed,))
    return parsed


class ReadMethods:
    """`Runtime`'s reads (mixed into it). Reads only."""

    queue: JobQueue
    store: JobStore
    policies: Policies

    def list_dead(self, *, tenant_id: str | None = None, limit: int = 100) -> Sequence[Job]:
        """Up to `limit` dead letters (jobs in state `failed`), of `tenant_id` only when
        given; each carries its `last_error`, the reason it was given up on."""
        _check_limit(limit)
        check_tenant_filter(tenant_id)
        return self.store.list_dead(tenant_id=tenant_id, limit=limit)

    def get(self, job_id: UUID | str) -> JobView | None:
        """The job in whatever state it is in (scheduled, pending, running, retrying,
        completed, failed), or None when no queue or store holds it. A malformed id is
        a `ValidationError`. Reads only; see `conveyor.shell.lookup`."""
        return find_job(self.queue, self.store, as_job_id(job_id), self._lease())

    def _state_of(self, job_id: UUID) -> JobStatus | None:
        view = self.get(job_id)
        return None if view is None else view.state

    def _was_pruned(self, job_id: UUID) -> bool:
        """True while the store keeps a tombstone of `job_id`'s pruned record."""
        store = self.store
        return isinstance(store, PruneRememberingStore) and store.pruned_at(job_id) is not None

    def list_jobs(
        self,
        *,
        queue: str | None = None,
        state: JobStatus | str | None = None,
        job_type: str | None = None,
        tenant_id: str | None = None,
        limit: int = 100,
    ) -> list[JobView]:
        """Up to `limit` jobs matching every filter given: queued work (running, pending,
        parked) first, then finished jobs, newest first. `state` may be a `JobStatus`
        or its name (`dead` for `failed`); a bad one is a `ValidationError`.
        `tenant_id` keeps only that tenant's jobs."""
        _check_limit(limit)
        check_tenant_filter(tenant_id)
        return list_jobs(
            self.queue,
            self.store,
            lease=self._lease(),
            queue_name=queue,
            state=as_state(state),
            job_type=job_type,
            tenant_id=tenant_id,
            limit=limit,
        )

    def _lease(self) -> timedelta:
        return timedelta(milliseconds=self.policies.lease.lease_ms)


def _check_limit(limit: object) -> None:
    """A listing's `limit`: a count (the stores would read -1 or 2.5 each their own way)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValidationError.of("limit", f"must be an integer >= 0, got {limit!r}")


def check_tenant_filter(tenant_id: object) -> None:
    """A read's `tenant_id`: None (every tenant) or a name a job can carry. An empty
    or malformed one is a `ValidationError` rather than a filter each backend would
    read its own way (one as "nobody", another as "anybody")."""
    if tenant_id is not None:
        error = check_name("tenant_id", tenant_id)
        if error is not None:
            raise ValidationError((error,))
