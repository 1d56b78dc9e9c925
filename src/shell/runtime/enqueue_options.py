"""The options of an enqueue: one frozen value for every entry point.

`Runtime.enqueue`, `enqueue_many`, `enqueue_in_tx`, `aenqueue`, `aenqueue_many`
and a task's `enqueue` (`conveyor.shell.tasks`) all turn their keyword options
into one `EnqueueOptions`, checked once for unknown names, and build their jobs
from it through the core's `create_job`, which reports every bad field at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
from returns.result import Failure, Success

from ...core import FieldError, FrozenMap, Job, JobStatus, Priority, ValidationError, create_job
from ...core.validation import freeze_args

#: The keyword options every enqueue method takes (`Runtime.enqueue` documents them).
ENQUEUE_OPTIONS = frozenset(
    {"queue", "priority", "max_retries", "run_at", "delay", "tenant_id", "timeout"}
    | {"id", "unique_key", "unique_for", "unique_states", "partition"}
)


@attrs.frozen(slots=True)
class EnqueueOptions:
    """The options of one enqueue call, shared by every job it makes (see
    `Runtime.enqueue` for each one's meaning). The defaults are the core's."""

    queue: str = "default"
    priority: Priority | str = Priority.NORMAL
    max_retries: int = 3
    run_at: datetime | None = None
    delay: timedelta | float | None = None
    tenant_id: str | None = None
    timeout: timedelta | float | None = None
    id: UUID | str | None = None
    unique_key: str | None = None
    unique_for: timedelta | float | None = None
    unique_states: Sequence[JobStatus | str] | None = None
    partition: str | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> EnqueueOptions:
        """The value of keyword `options`; a `TypeError` names any unknown one."""
        unknown = set(options) - ENQUEUE_OPTIONS
        if unknown:
            raise TypeError(f"unexpected options: {sorted(unknown)}")
        return cls(**options)

    @property
    def once(self) -> bool:
        """True when the enqueue must not write a job that is already there: the caller
        chose its id or gave it a unique key (a fresh random id needs no look)."""
        return self.id is not None or self.unique_key is not None

    @property
    def plain(self) -> bool:
        """True when the jobs are a plain upsert: no id, no unique key (what the
        asyncio drivers write)."""
        return (
            self.id is None
            and self.unique_key is None
            and self.unique_for is None
            and self.unique_states is None
        )

    def job(self, job_type: str, args: Mapping[str, Any] | None, now: datetime) -> Job:
        """A validated new job with these options; a `ValidationError` names every bad
        field (the options' and the args' alike)."""
        result = create_job(
            id=uuid.uuid4() if self.id is None else self.id,
            job_type=job_type,
            args=args,
            now=now,
            queue=self.queue,
            priority=self.priority,
            max_retries=self.max_retries,
            run_at=self.run_at,
            delay=self.delay,
            tenant_id=self.tenant_id,
            timeout=self.timeout,
            unique_key=self.unique_key,
            unique_for=self.unique_for,
            unique_states=self.unique_states,
            partition=self.partition,
        )
        match result:
            case Success(job):
                return job  # type: ignore[no-any-return]
            case Failure(error):
                raise error
        raise AssertionError("unreachable")

    def jobs(
        self,
        job_type: str,
        args_list: Sequence[Mapping[str, Any] | None],
        now: datetime,
        *,
        listed: bool = False,
    ) -> list[Job]:
        """One validated new job per args mapping, all made at `now`: the options are
        checked once, with the first job; each further job differs from it only in its
        args (checked alone) and, unless `id` names them all, its fresh id. `listed`:
        the args are a caller's list (`enqueue_many`), so a bad entry is named by its
        index (`args_list[2]`), every bad one at once."""
        if not args_list:
            return []
        try:
            first = self.job(job_type, args_list[0], now)
        except ValidationError as exc:
            if not listed:
                raise
            raise ValidationError(_indexed(exc.errors, args_list)) from None
        jobs = [first]
        if len(args_list) == 1:
            return jobs
        # The first job's own field values, each the very object (see `encode_many`).
        fields = {f.name: getattr(first, f.name) for f in attrs.fields(Job)}
        for args in args_list[1:]:
            frozen = freeze_args({} if args is None else args)
            if not isinstance(frozen, FrozenMap):
                raise ValidationError(_indexed((), args_list))
            fields["id"] = first.id if self.id is not None else uuid.uuid4()
            fields["args"] = frozen
            jobs.append(Job(**fields))
        return jobs


def _indexed(
    first: Iterable[FieldError], args_list: Sequence[Mapping[str, Any] | None]
) -> list[FieldError]:
    """The first job's problems, its args' named `args_list[0]`, then every further bad
    args entry's under its index (looked for only once a write has been refused)."""
    found = [_at(0, e) for e in first]
    for index, args in enumerate(args_list[1:], 1):
        frozen = freeze_args({} if args is None else args)
        if isinstance(frozen, FieldError):
            found.append(_at(index, frozen))
    return found


def _at(index: int, error: FieldError) -> FieldError:
    if error.field != "args" and not error.field.startswith(("args.", "args[")):
        return error
    return FieldError(f"args_list[{index}]{error.field[4:]}", error.reason)


def args_list_of(value: object) -> Sequence[Mapping[str, Any] | None]:
    """`enqueue_many`'s args list as a sequence: any iterable of args mappings (a
    generator too), not a mapping itself (one job's args), which is refused."""
    if isinstance(value, Mapping | str | bytes):
        what = type(value).__name__
        raise ValidationError.of(
            "args_list", f"must be a list of args mappings, one per job, got a {what}"
        )
    if isinstance(value, Sequence):
        return value
    if isinstance(value, Iterable):
        return list(value)
    raise ValidationError.of("args_list", f"must be a list of args mappings, got {value!r}")
