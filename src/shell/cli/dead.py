"""`conveyor dead`: list, show, retry and purge the dead letters, one or in bulk.

`dead list` says when it shows only part of them. `dead retry --all` re-enqueues
every dead letter matching `--queue`, `--type` and `--tenant`. `dead purge --all`
deletes, so it asks first on a terminal, and without one (a script, a pipe)
refuses unless `--yes` is given.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ...core import FieldError, Job, JobStatus, ValidationError, check_name, thaw
from ...core.validation import parse_job_id
from ..dead_letters import count_dead, dead_filter, purge_matching, retry_matching
from ..lookup import attempt_dict
from ..notices import notice
from ..ports import HistoryFilter, UniqueKeyHeld
from ..terminal import clipped, escape, print_table
from .runtime import limit_problem

if TYPE_CHECKING:
    from ..runtime import Runtime


def add_dead_commands(sub: Any, func: Callable[[argparse.Namespace], int]) -> None:
    """The `dead` command and its subcommands, on the CLI's subparsers `sub`."""
    d = sub.add_parser("dead", help="the dead letters: list, show, retry, purge")
    dsub = d.add_subparsers(dest="dead_command", required=True)
    dl = dsub.add_parser("list", help="newest first")
    dl.add_argument("--tenant", default=None)
    dl.add_argument("--limit", type=int, default=50, help="show at most N (default 50)")
    dl.add_argument("--json", action="store_true")
    ds = dsub.add_parser("show", help="one dead letter (args hidden unless --show-args)")
    ds.add_argument("job_id")
    ds.add_argument(
        "--show-args", action="store_true", help="print the job args (may hold secrets)"
    )
    dr = dsub.add_parser(
        "retry", help="re-enqueue a dead letter, or --all that match, with retries reset"
    )
    dr.add_argument("job_id", nargs="?")
    dr.add_argument("--all", action="store_true", help="every dead letter the filters match")
    _filters(dr)
    dp = dsub.add_parser("purge", help="delete one dead letter, or --all that match")
    dp.add_argument("job_id", nargs="?")
    dp.add_argument("--all", action="store_true", help="every dead letter the filters match")
    _filters(dp)
    dp.add_argument(
        "--yes", "-y", action="store_true", help="do not ask before deleting (for scripts)"
    )
    d.set_defaults(func=func)


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", "-q", default=None, help="with --all: only this queue's")
    parser.add_argument("--type", default=None, help="with --all: only this job type's")
    parser.add_argument("--tenant", default=None, help="with --all: only this tenant's")


def run_dead(args: argparse.Namespace, make_runtime: Callable[[], Runtime]) -> int:
    """Carry out `conveyor dead ...`; `make_runtime` builds the runtime once the input
    has been checked. Returns the exit status."""
    where = _check(args)
    job_id = None if getattr(args, "job_id", None) is None else _job_id(args.job_id)
    runtime = make_runtime()
    try:
        if args.dead_command == "list":
            return _list(runtime, args)
        if args.dead_command == "show":
            assert job_id is not None
            return _show(runtime, job_id, args.show_args)
        if args.dead_command == "retry":
            if job_id is None:
                refused: list[UUID] = []
                done = retry_matching(runtime, where, refused)
                letters = "dead letter" if done == 1 else "dead letters"
                left = f"; {len(refused)} refused (named above)" if refused else ""
                print(f"re-enqueued {done} {letters}{_described(where)}{left}")
                return 1 if refused else 0
            else:
                try:
                    job = runtime.retry_dead(job_id)
                except ValidationError as refused:
                    if isinstance(refused.__cause__, UniqueKeyHeld):
                        notice(f"conveyor: job {refused.errors[0].reason}", level=logging.ERROR)
                        return 1
                    return _no_dead_letter(runtime, job_id)
                print(f"re-enqueued {job.id} on {escape(job.queue)}")
            return 0
        if job_id is not None:
            if runtime.purge_dead(job_id) == 0:
                return _no_dead_letter(runtime, job_id, purging=True)
            print("purged 1")
            return 0
        return _purge_all(runtime, where, args.yes)
    finally:
        runtime.close()


def _check(args: argparse.Namespace) -> HistoryFilter:
    """The filter of a bulk command; every problem of the input raised at once."""
    tenant = getattr(args, "tenant", None)
    problems: list[FieldError | None] = [None if tenant is None else check_name("--tenant", tenant)]
    command = args.dead_command
    if command == "list":
        problems.append(limit_problem(args.limit))
    if command in ("retry", "purge"):
        given = [f"--{k}" for k in ("queue", "type", "tenant") if getattr(args, k) is not None]
        if args.job_id is None and not args.all:
            verb = "re-enqueue" if command == "retry" else "delete"
            problems.append(FieldError("job_id", f"give a job id, or --all to {verb} every match"))
        elif args.job_id is not None and (args.all or given):
            extra = ", ".join(["--all", *given] if args.all else given)
            problems.append(FieldError("job_id", f"give a job id or {extra}, not both"))
        problems.append(None if args.queue is None else check_name("--queue", args.queue))
        problems.append(None if args.type is None else check_name("--type", args.type))
    errors = [p for p in problems if p is not None]
    if errors:
        raise ValidationError(errors)
    if command in ("retry", "purge"):
        return dead_filter(queue=args.queue, job_type=args.type, tenant_id=args.tenant)
    return dead_filter(tenant_id=tenant)


def _job_id(value: str) -> UUID:
    parsed = parse_job_id(value)
    if isinstance(parsed, FieldError):
        raise ValidationError((parsed,))
    return parsed


def _described(where: HistoryFilter) -> str:
    parts = [
        f"{name} {escape(value)}"
        for name, value in (
            ("queue", where.queue),
            ("type", where.job_type),
            ("tenant", where.tenant_id),
        )
        if value is not None
    ]
    return f" ({', '.join(parts)})" if parts else ""


def _list(runtime: Runtime, args: argparse.Namespace) -> int:
    jobs = runtime.list_dead(tenant_id=args.tenant, limit=args.limit)
    total = count_dead(runtime.store, dead_filter(tenant_id=args.tenant))
    note = None
    if len(jobs) < total:
        shown = f"showing {len(jobs):,} of {total:,} dead letters, newest first"
        note = f"{shown}; --limit N shows more"
    if args.json:
        print(json.dumps([job_summary(j) for j in jobs], indent=2))
        if note is not None:
            notice(f"conveyor: {note}")
        return 0
    print_table(
        ("id", "queue", "job type", "tenant", "error", "message", "finished"),
        [
            (
                j.id,
                j.queue,
                j.job_type,
                j.tenant_id,
                j.last_error.type if j.last_error else None,
                (clipped(j.last_error.message, 60) if j.last_error else None),
                j.finished_at.isoformat(timespec="seconds") if j.finished_at else None,
            )
            for j in jobs
        ],
    )
    if note is not None:
        print(note)
    return 0


def _show(runtime: Runtime, job_id: UUID, show_args: bool) -> int:
    job = runtime.store.get(job_id)
    if job is None or job.status is not JobStatus.FAILED:
        return _no_dead_letter(runtime, job_id)
    summary = job_summary(job)
    # The failing attempt's traceback, and what the attempts before it did.
    summary["traceback"] = job.last_error.traceback if job.last_error else None
    summary["attempts"] = [attempt_dict(attempt) for attempt in job.attempts]
    if show_args:
        summary["args"] = thaw(job.args)
    print(json.dumps(summary, indent=2))
    return 0


def _no_dead_letter(runtime: Runtime, job_id: UUID, *, purging: bool = False) -> int:
    """Say what a job given as a dead letter is instead, if it is anything, or why a
    purge kept it; exit 1."""
    view = runtime.get(job_id)
    if purging and view is not None and view.state is JobStatus.FAILED:
        notice(
            f"conveyor: dead letter {job_id} is kept: a job still queued depends on it "
            "(its release and its inputs read it); purge it once that job has ended",
            level=logging.ERROR,
        )
    elif view is None:
        # Pruned by retention, or never known here: said as `job show` says it.
        notice(f"conveyor: {runtime.not_found(job_id)}", level=logging.ERROR)
    else:
        notice(
            f"conveyor: job {job_id} is not a dead letter: it is {view.state.value} "
            f"(conveyor job show {job_id})",
            level=logging.ERROR,
        )
    return 1


def _purge_all(runtime: Runtime, where: HistoryFilter, yes: bool) -> int:
    count = count_dead(runtime.store, where)
    what = f"{count:,} dead letters{_described(where)}"
    if count == 0:
        print("purged 0")
        return 0
    if not yes:
        if not sys.stdin.isatty():
            notice(
                f"conveyor: dead purge --all would delete {what}; give --yes to confirm "
                "(there is no terminal to ask on)",
                level=logging.ERROR,
            )
            return 2
        answer = input(f"Delete {what}? This cannot be undone. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing purged")
            return 1
    purged = purge_matching(runtime, where)
    kept = max(0, count - purged)
    # A dead letter a job still queued depends on stays (docs/workflows.md).
    note = f"; {kept:,} kept: jobs still queued depend on them" if kept else ""
    print(f"purged {purged}{note}")
    return 0


def job_summary(job: Job) -> dict[str, Any]:
    """A dead letter as `dead list --json` and `dead show` print it (no args)."""
    return {
        "id": str(job.id),
        "job_type": job.job_type,
        "queue": job.queue,
        "priority": job.priority.value,
        "status": job.status.value,
        "tenant_id": job.tenant_id,
        "attempt": job.attempt,
        "retry_count": job.retry_count,
        "max_retries": job.max_retries,
        "created_at": job.created_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "last_error": None
        if job.last_error is None
        else {"type": job.last_error.type, "message": job.last_error.message},
    }
