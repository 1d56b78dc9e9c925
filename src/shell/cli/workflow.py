"""`conveyor workflow`: one workflow's jobs and what waits on what, and its cancel."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from ..notices import notice
from ..terminal import print_table
from .runtime import command_runtime, job_id_arg


def add_workflow_commands(sub: Any) -> None:
    """The `workflow` command, on the CLI's subparsers `sub`."""
    w = sub.add_parser("workflow", help="a workflow's jobs, what waits on what, its cancel")
    wsub = w.add_subparsers(dest="workflow_command", required=True)
    ws = wsub.add_parser("show", help="each job's state and the jobs it waits for")
    ws.add_argument("workflow_id")
    ws.add_argument("--json", action="store_true", help="machine-readable output")
    wc = wsub.add_parser("cancel", help="cancel every unfinished job of the workflow")
    wc.add_argument("workflow_id")
    wc.add_argument("--json", action="store_true", help="machine-readable output")
    w.set_defaults(func=cmd_workflow)


def cmd_workflow(args: argparse.Namespace) -> int:
    """0 on success; 1 when no workflow has the id; 2 on bad input."""
    workflow_id = job_id_arg(args.workflow_id, "workflow_id")
    cancelling = args.workflow_command == "cancel"
    runtime = command_runtime(args, reads_only=not cancelling)
    try:
        state = runtime.workflow(workflow_id)
        if state is None:
            notice(f"conveyor: no workflow {workflow_id}", level=logging.ERROR)
            return 1
        if cancelling:
            counts = runtime.cancel_workflow(workflow_id)
            if args.json:
                print(json.dumps({"workflow_id": str(workflow_id), "counts": dict(counts)}))
                return 0
            done = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
            print(f"workflow {workflow_id}: {done}")
            return 0
    finally:
        runtime.close()
    if args.json:
        print(json.dumps(state.as_dict(), indent=2))
        return 0
    rows = [
        (
            m.name,
            m.job_id,
            "unknown" if m.state is None else m.state.value,
            ", ".join(f"{d} ({p})" for d, p in m.waits_for) or "-",
            m.error or "",
        )
        for m in state.members
    ]
    print_table(["name", "job id", "state", "waits for (on failure)", "error"], rows)
    totals = ", ".join(f"{n} {s}" for s, n in sorted(state.counts.items()))
    print(f"\nworkflow {state.state.value}; {len(rows)} jobs: {totals}")
    return 0
