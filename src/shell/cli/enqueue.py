"""`conveyor enqueue`: enqueue one job and print its id."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from ...core import FieldError, ValidationError, parse_duration_ms
from ...core.times import as_delay
from .runtime import command_runtime


def add_enqueue_command(sub: Any) -> None:
    """The `enqueue` command, on the CLI's subparsers `sub`."""
    e = sub.add_parser("enqueue", help="enqueue one job and print its id")
    e.add_argument("job_type")
    e.add_argument("args", nargs="?", default="{}", help="job args as a JSON object")
    # Unset, these three come from the task's own defaults (`@tasks.task(queue=...)`)
    # when a configured handler module declares one, else from `Runtime.enqueue`'s.
    e.add_argument("--queue", "-q", default=None, help="(default: the task's, else default)")
    e.add_argument(
        "--priority",
        "-p",
        default=None,
        choices=["critical", "high", "normal", "low"],
        help="(default: the task's, else normal)",
    )
    e.add_argument("--max-retries", type=int, default=None, help="(default: the task's, else 3)")
    e.add_argument(
        "--delay",
        type=seconds,
        default=None,
        help="from now: seconds (90, 1.5) or 90s, 30m, 12h, 7d",
    )
    e.add_argument("--tenant", default=None)
    e.add_argument(
        "--partition", default=None, help="the job's partition under limits (default: the tenant)"
    )
    e.add_argument(
        "--timeout",
        type=seconds,
        default=None,
        help="how long one attempt may run (seconds, or 90s, 30m, ...; see handlers)",
    )
    e.add_argument(
        "--id", default=None, help="the job's id (a UUID); if taken, the job already there stays"
    )
    e.add_argument("--unique-key", default=None, help="enqueue nothing while this key is held")
    e.add_argument(
        "--unique-for",
        type=seconds,
        default=None,
        help="how long the key is held at most (seconds, or 90s, 30m, 12h, 7d)",
    )
    e.add_argument(
        "--unique-state",
        action="append",
        default=None,
        help="a state in which the key is held (repeat; default: the unfinished ones)",
    )
    e.add_argument(
        "--strict",
        action="store_true",
        help="refuse a job type that no configured handler module registers",
    )
    e.set_defaults(func=cmd_enqueue)


def seconds(text: str) -> float:
    """A command line's span of time: seconds as a number (`90`, `1.5`), or a duration
    with its unit (`90s`, `30m`, `12h`, `7d`), as `prune --older-than` takes it."""
    try:
        return float(text)
    except ValueError:
        pass
    ms = parse_duration_ms(text.strip())
    if ms is None and text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    if ms is None:
        raise argparse.ArgumentTypeError(
            f"must be seconds (90, 1.5) or a duration such as 90s, 30m, 12h or 7d, got {text!r}"
        )
    return ms / 1000


#: The flag that gives each enqueue option, for messages about what was typed.
FLAGS = {
    "queue": "--queue", "priority": "--priority", "max_retries": "--max-retries",
    "delay": "--delay", "tenant_id": "--tenant", "partition": "--partition",
    "timeout": "--timeout", "id": "--id", "unique_key": "--unique-key",
    "unique_for": "--unique-for", "unique_states": "--unique-state",
}  # fmt: skip


#: An option a reason says another needs ("needs unique_key"); the value typed, which
#: the reason may quote, is left as it was.
_MENTIONED = re.compile(r"\bneeds (" + "|".join(FLAGS) + r")\b")


def _as_flags(exc: ValidationError, typed: set[str]) -> ValidationError:
    """`exc` with each field the command line gave named by its flag, and the options
    its reason mentions too; a field from the task's defaults keeps its option name."""

    def flagged(e: FieldError) -> FieldError:
        reason = _MENTIONED.sub(lambda m: f"needs {FLAGS[m[1]]}", e.reason)
        return FieldError(FLAGS[e.field], reason)

    return ValidationError([flagged(e) if e.field in typed else e for e in exc.errors])


def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.args) if args.args else {}
    except json.JSONDecodeError as exc:
        raise ValidationError.of("args", f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ValidationError.of("args", "is nested too deeply to parse") from None
    except ValueError:
        # json's own limit on integer digits; its message suggests a Python call.
        raise ValidationError.of("args", "holds an integer with too many digits") from None
    if payload is None:  # `null` is no object (Python's None would read as no args)
        raise ValidationError.of("args", "must be a JSON object (a mapping), got null")
    delay = None if args.delay is None else as_delay("delay", args.delay)
    if isinstance(delay, FieldError):
        raise ValidationError((delay,))
    runtime = command_runtime(args)
    try:
        unknown = runtime.unknown_job_type(args.job_type)
        if unknown is not None and args.strict:
            raise ValidationError.of("job_type", unknown)
        if args.strict and not runtime.registry.job_types():
            raise ValidationError.of(
                "--strict",
                "this config loads no handler module, so no job type can be checked: name "
                "one in `handlers` (or CONVEYOR_HANDLERS)",
            )
        given = {
            "queue": args.queue,
            "priority": args.priority,
            "max_retries": args.max_retries,
            "delay": delay,
            "tenant_id": args.tenant,
            "partition": args.partition,
            "timeout": args.timeout,
            "id": args.id,
            "unique_key": args.unique_key,
            "unique_for": args.unique_for,
            "unique_states": args.unique_state,
        }
        # The task's defaults, then whatever the command line says: as `task.enqueue`.
        options = runtime.registry.task_defaults(args.job_type) | {
            k: v for k, v in given.items() if v is not None
        }
        try:
            job = runtime.enqueue(args.job_type, payload, **options)
        except ValidationError as exc:
            raise _as_flags(exc, {k for k, v in given.items() if v is not None}) from None
    finally:
        runtime.close()
    print(job.id)
    return 0
