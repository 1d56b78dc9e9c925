"""`conveyor status`: queues, counts, dead letters, limits and live workers."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ...core.limit_report import LimitReport
from ..runtime.status import Status
from ..terminal import escape, print_table
from .runtime import check, command_runtime, tenant_problem


def add_status_command(sub: Any) -> None:
    """The `status` command, on the CLI's subparsers `sub`."""
    s = sub.add_parser("status", help="queues, counts, dead letters and live workers")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument(
        "--tenant",
        default=None,
        help="count only this tenant's dead letters (the other counts are of every tenant)",
    )
    s.add_argument("--strict", action="store_true", help="exit 1 when a queue is flagged")
    s.set_defaults(func=cmd_status)


def render_status(status: Status) -> None:
    rows = []
    for q in status.queues:
        age = None if q.oldest_ready_age_s is None else f"{q.oldest_ready_age_s:.1f}s"
        flag = (
            "NO LIVE WORKER POLLS THIS QUEUE"
            if q.flagged
            else ("" if q.configured else "not in workers.queues")
        )
        counts = (q.ready, q.scheduled, q.waiting, q.in_flight, q.dead)
        rows.append((q.queue, *counts, age, len(q.pollers), flag))
    print_table(
        (
            "queue",
            *("ready", "scheduled", "waiting", "in flight", "dead"),
            *("oldest ready", "pollers", "note"),
        ),
        rows,
    )
    print()
    for report in status.limits:
        render_limits(report)
        print()
    if status.workers:
        print_table(
            ("worker", "host", "pid", "queues", "last seen"),
            [
                (
                    w.worker_id,
                    w.host,
                    w.pid,
                    ",".join(w.queues),
                    w.last_seen.isoformat(timespec="seconds"),
                )
                for w in status.workers
            ],
        )
    else:
        print("no live workers")


def render_limits(report: LimitReport) -> None:
    """One limited queue: each partition's share and what its next job waits for, the
    caps in use (per-partition ones only where used) and the rates' tokens."""
    kind = "fair shares" if report.fair else "oldest first"
    print(
        f"limits of queue {escape(report.queue)} ({kind}): {report.running} running,"
        f" {report.throttled} ready held back by a cap or a rate"
    )
    print_table(
        ("partition", "weight", "share", "ready", "running", "next job"),
        [
            (
                p.label,
                f"{p.weight:g}",
                "-" if p.share is None else f"{p.share:.0%}",
                p.ready,
                p.running,
                p.waits or ("can start" if p.ready else "-"),
            )
            for p in report.partitions
        ]
        or [("(none)", "-", "-", 0, 0, "no ready or running job")],
    )
    caps = report.shown_caps
    if caps:
        print_table(
            ("cap", "partition", "in use", "note"),
            [
                (
                    c.label,
                    "-" if c.partition is None else (c.partition or "(default)"),
                    f"{c.in_use}/{c.max_running}",
                    "FULL" if c.full else "",
                )
                for c in caps
            ],
        )
    if report.shown_rates:
        print_table(
            ("rate", "partition", "tokens", "note"),
            [
                (
                    r.label,
                    "-" if r.partition is None else (r.partition or "(default)"),
                    f"{r.tokens:.1f}/{r.starts}",
                    "" if r.next_token_s is None else f"next token in {r.next_token_s:.1f}s",
                )
                for r in report.shown_rates
            ],
        )


def cmd_status(args: argparse.Namespace) -> int:
    check(tenant_problem(args.tenant))
    runtime = command_runtime(args, reads_only=True)
    try:
        status = runtime.status(tenant_id=args.tenant)
    finally:
        runtime.close()
    if args.json:
        print(json.dumps(status.to_dict(), indent=2))
    else:
        render_status(status)
        if args.tenant is not None:
            # Queues keep no count per tenant (a listing reads their jobs one by one).
            tenant = escape(args.tenant)
            print(
                f"\n--tenant {tenant}: the dead column counts {tenant}'s dead letters only; "
                f"the other columns count every tenant's jobs (conveyor jobs list --tenant "
                f"{tenant} lists {tenant}'s)"
            )
    return 1 if any(q.flagged for q in status.queues) and args.strict else 0
