"""`conveyor cron`: the periodic jobs, listed with their next and last runs, or run now."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..terminal import print_table
from .runtime import command_runtime


def add_cron_command(sub: Any) -> None:
    """The `cron` command, on the CLI's subparsers `sub`."""
    cr = sub.add_parser("cron", help="the periodic jobs: list them, or run one now")
    crsub = cr.add_subparsers(dest="cron_command", required=True)
    crl = crsub.add_parser("list", help="each entry with its next run and its last run")
    crl.add_argument("--json", action="store_true", help="machine-readable output")
    crr = crsub.add_parser("run", help="enqueue an entry's job now, outside its schedule")
    crr.add_argument("name", help="the entry's name")
    cr.set_defaults(func=cmd_cron)


def cmd_cron(args: argparse.Namespace) -> int:
    runtime = command_runtime(args, reads_only=args.cron_command == "list")
    try:
        if args.cron_command == "run":
            job = runtime.cron.run(args.name)
            print(job.id)
            return 0
        rows = runtime.cron.list()
    finally:
        runtime.close()
    if args.json:
        print(json.dumps([row.to_dict() for row in rows], indent=2))
    elif not rows:
        print("no cron entries ([[cron]] in the config)")
    else:
        print_table(
            ("name", "schedule", "timezone", "job type", "next run", "last run", "state"),
            [
                (
                    r.name,
                    r.schedule,
                    r.timezone,
                    r.job_type,
                    r.next_run.isoformat(timespec="seconds"),
                    None if r.last_slot is None else r.last_slot.isoformat(timespec="seconds"),
                    None if r.last_state is None else r.last_state.value,
                )
                for r in rows
            ],
        )
    return 0
