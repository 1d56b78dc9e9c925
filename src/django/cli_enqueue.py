"""`manage.py conveyor enqueue TASK '{"args": [...], "kwargs": {...}}'`: one call of a
task of the project, enqueued through its backend as `task.enqueue(...)` would be.

Conveyor's own `enqueue` writes a job of any type with Conveyor's defaults (3
retries); a Django task's job must hold a call in the backend's shape and take the
backend's `OPTIONS` (`RETRIES`, `TIMEOUT`) and `QUEUES`. So this command finds the
task, applies the options given as `task.using(...)` would, and calls the backend's
`enqueue`, which refuses what it refuses for any caller; each refusal names the field.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import Any, NoReturn

#: Conveyor's `enqueue` options a Django task's call has no place for.
REFUSED = ("--tenant", "--id", "--unique-for", "--unique-state", "--strict")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


class _Refused(Exception):
    """A bad command line, named by its field."""


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="manage.py conveyor enqueue",
        description="enqueue one call of a task of this project and print its id",
    )
    p.add_argument("task", help="the task's module path (probe.tasks.add)")
    p.add_argument("call", nargs="?", default="{}", help='{"args": [...], "kwargs": {...}}')
    p.add_argument("--queue", "-q", default=None)
    p.add_argument("--priority", "-p", type=int, default=None)
    p.add_argument("--max-retries", type=int, default=None)
    p.add_argument("--timeout", type=float, default=None)
    p.add_argument("--delay", type=float, default=None)
    p.add_argument("--unique-key", default=None)
    p.add_argument("--partition", default=None)
    for name in REFUSED:
        p.add_argument(name, nargs="?", const=True, default=None)
    return p


def enqueue_command(argv: list[str], backend: Any) -> str:
    """The id of the job `argv` (what follows `enqueue`) enqueues on `backend`;
    `ValueError` naming the field of whatever the backend would refuse."""
    from django.utils import timezone

    from .compat import InvalidTask
    from .discovery import known_task

    try:
        args = _parser().parse_args(argv)
    except _Refused as exc:
        raise ValueError(str(exc)) from None
    for name in REFUSED:
        if getattr(args, name[2:].replace("-", "_")) is not None:
            raise ValueError(f"{name}: a Django task's enqueue has no such option")
    positional, keywords = _call(args.call)
    try:
        task = known_task(args.task, type(backend), backend.settings.modules)
    except LookupError as exc:
        raise ValueError(f"task: {exc}") from None
    changes: dict[str, Any] = {"backend": backend.alias}
    for field, value in (
        ("queue_name", args.queue),
        ("priority", args.priority),
        ("retries", args.max_retries),
        ("timeout", args.timeout),
        ("unique_key", args.unique_key),
        ("partition", args.partition),
    ):
        if value is not None:
            changes[field] = value
    if args.delay is not None:
        changes["run_after"] = timezone.now() + timedelta(seconds=args.delay)
    try:
        result = task.using(**changes).enqueue(*positional, **keywords)
    except InvalidTask as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
    return str(result.id)


def _call(text: str) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments of the call `text` gives (JSON)."""
    shape = 'must be a JSON object {"args": [...], "kwargs": {...}}, the call of the task'
    try:
        call = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"args: {shape}; not JSON: {exc}") from None
    if not isinstance(call, dict) or set(call) - {"args", "kwargs"}:
        raise ValueError(f"args: {shape}, got {text}")
    positional, keywords = call.get("args", []), call.get("kwargs", {})
    if not isinstance(positional, list):
        raise ValueError(f"args['args']: must be a JSON list, got {json.dumps(positional)}")
    if not isinstance(keywords, dict):
        raise ValueError(f"args['kwargs']: must be a JSON object, got {json.dumps(keywords)}")
    return positional, keywords
