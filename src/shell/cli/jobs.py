"""`conveyor job` and `conveyor jobs`: one job in whatever state it is in, and listings
and cancels by queue, state and type."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from ...core import FieldError, ValidationError
from ...core.validation import check_name
from ..notices import notice
from ..terminal import escape, print_table
from .runtime import check, command_runtime, job_id_arg, limit_problem


def add_job_commands(sub: Any) -> None:
    """The `job` and `jobs` commands, on the CLI's subparsers `sub`."""
    j = sub.add_parser("job", help="one job, in whatever state it is in")
    jsub = j.add_subparsers(dest="job_command", required=True)
    js = jsub.add_parser("show", help="state, attempts, claim and lease, error (args hidden)")
    js.add_argument("job_id")
    js.add_argument("--json", action="store_true", help="machine-readable output")
    js.add_argument("--show-args", action="store_true", help="print the args (may hold secrets)")
    js.add_argument(
        "--show-result", action="store_true", help="print the result (may hold secrets)"
    )
    js.add_argument(
        "--traceback", action="store_true", help="print each attempt's traceback (--json has them)"
    )
    jc = jsub.add_parser("cancel", help="cancel a queued job, or ask a running one to stop")
    jc.add_argument("job_id")
    j.set_defaults(func=cmd_job)

    jl = sub.add_parser("jobs", help="list jobs by queue, state and type")
    jlsub = jl.add_subparsers(dest="jobs_command", required=True)
    jll = jlsub.add_parser("list", help="queued work first, then finished jobs, newest first")
    jll.add_argument("--queue", "-q", default=None)
    jll.add_argument(
        "--state",
        default=None,
        help=(
            "scheduled, waiting, pending, running, retrying, completed, failed, cancelled "
            "(dead = failed)"
        ),
    )
    jll.add_argument("--type", default=None, help="only jobs of this job type")
    jll.add_argument("--tenant", default=None, help="only this tenant's jobs")
    jll.add_argument("--limit", type=int, default=50, help="show at most N (default 50)")
    jll.add_argument("--json", action="store_true", help="machine-readable output")
    jlc = jlsub.add_parser(
        "cancel", help="cancel every queued job of a queue and/or type; ask running ones to stop"
    )
    jlc.add_argument("--queue", "-q", default=None)
    jlc.add_argument("--type", default=None, help="only jobs of this job type")
    jlc.add_argument("--dry-run", action="store_true", help="only count what would be done")
    jl.set_defaults(func=cmd_jobs)


def cmd_job(args: argparse.Namespace) -> int:
    from ..lookup import describe

    if args.job_command == "cancel":
        return cmd_job_cancel(args)
    job_id = job_id_arg(args.job_id)
    runtime = command_runtime(args, reads_only=True)
    try:
        view = runtime.get(job_id)
        missing = None if view is not None else runtime.not_found(job_id)
    finally:
        runtime.close()
    if view is None:
        # Pruned by retention, or never known here: said as `result()` says it.
        notice(f"conveyor: {missing}", level=logging.ERROR)
        return 1
    shown = {"show_args": args.show_args, "show_result": args.show_result}
    if args.json:
        print(json.dumps(view.to_dict(**shown), indent=2))
    else:
        lines = describe(view, **shown, show_traceback=args.traceback)
        print("\n".join(escape(line) for line in lines))
    return 0


def cmd_job_cancel(args: argparse.Namespace) -> int:
    """`conveyor job cancel ID`: 0 when cancelled or requested, 1 when there was nothing
    to cancel (finished, or no such job), 2 on bad input."""
    from ...core import CancelResult

    job_id = job_id_arg(args.job_id)
    runtime = command_runtime(args, reads_only=True)  # cancels only what is stored
    try:
        result = runtime.cancel(job_id)
        missing = runtime.not_found(job_id) if result is CancelResult.NOT_FOUND else None
    finally:
        runtime.close()
    if result is CancelResult.CANCELLED:
        print(f"cancelled job {job_id}")
    elif result is CancelResult.REQUESTED:
        print(f"cancel requested for running job {job_id}: recorded cancelled when it returns")
    elif result is CancelResult.FINISHED:
        notice(f"conveyor: job {job_id} has already finished; nothing to cancel")
        return 1
    else:
        notice(f"conveyor: {missing}", level=logging.ERROR)
        return 1
    return 0


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    """`conveyor jobs cancel --queue Q --type T [--dry-run]`: 0 on success (also when
    nothing matched), 2 on bad input."""
    if args.queue is None and args.type is None:
        raise ValidationError.of("--queue", "give --queue, --type or both")
    check(
        None if args.queue is None else check_name("--queue", args.queue),
        None if args.type is None else check_name("--type", args.type),
    )
    runtime = command_runtime(args, reads_only=True)  # cancels only what is stored
    try:
        counts = runtime.cancel_many(queue=args.queue, job_type=args.type, dry_run=args.dry_run)
    finally:
        runtime.close()
    verb, ask = ("would cancel", "ask") if args.dry_run else ("cancelled", "asked")
    print(f"{verb} {counts.cancelled} queued jobs, {ask} {counts.requested} running jobs to stop")
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from ..lookup import SUMMARY_HEADERS, parse_state, summary_row

    if args.jobs_command == "cancel":
        return cmd_jobs_cancel(args)
    state = None if args.state is None else parse_state(args.state, "--state")
    check(
        None if args.queue is None else check_name("--queue", args.queue),
        None if args.type is None else check_name("--type", args.type),
        None if args.tenant is None else check_name("--tenant", args.tenant),
        state if isinstance(state, FieldError) else None,
        limit_problem(args.limit),
    )
    assert not isinstance(state, FieldError)
    runtime = command_runtime(args, reads_only=True)
    try:
        views = runtime.list_jobs(
            queue=args.queue,
            state=state,
            job_type=args.type,
            tenant_id=args.tenant,
            limit=args.limit + 1,  # one more: whether the listing stops short
        )
    finally:
        runtime.close()
    more = len(views) > args.limit
    views = views[: args.limit]
    jobs = "job" if len(views) == 1 else "jobs"
    note = f"showing the first {len(views):,} {jobs}; --limit N shows more" if more else None
    if args.json:
        print(json.dumps([v.to_dict() for v in views], indent=2))
        if note is not None:
            notice(f"conveyor: {note}")
    else:
        print_table(SUMMARY_HEADERS, [summary_row(v) for v in views])
        if note is not None:
            print(note)
    return 0
