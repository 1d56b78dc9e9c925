"""The `conveyor` command line: worker, enqueue, status, dead, migrate, cron, dashboard, demo.

Every command reads the same config as `conveyor.build` (`--config FILE`, or
the nearest `conveyor.toml` / `[tool.conveyor]`, then `CONVEYOR_*` variables).
This module holds the parser and the dispatch; each family of commands lives in a
module of its own (`cli_worker`, `cli_enqueue`, `cli_status`, `cli_dead`,
`cli_maintenance`, `cli_jobs`, `cli_cron`, `cli_dashboard`), and what they share
in `cli_runtime`.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import Any, NoReturn

from ...core import ValidationError
from ...version import __version__
from ..endpoints import endpoint, sqlite_refusal
from ..logs import CappedTraceback, WrittenOnTheWay
from ..notices import notice, use_json
from ..outage import ServerUnreachable, is_outage
from ..redact import BackendError
from .cron import add_cron_command
from .dashboard import add_dashboard_command
from .dead import add_dead_commands, run_dead
from .enqueue import add_enqueue_command
from .jobs import add_job_commands
from .maintenance import add_maintenance_commands
from .runtime import ESCAPING, LOADED, REDACTING, command_runtime, printable
from .status import add_status_command
from .supervisor import COPY_REFUSED_EXIT, INVALID_INPUT_EXIT, PROCESS_INDEX_ENV
from .worker import add_worker_command
from .workflow import add_workflow_commands

log = logging.getLogger("conveyor.cli")

#: What `--log-level` takes, in any case.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


#: What argparse takes for a negative number, and so for a value rather than a flag:
#: its own pattern, and a negative duration (`-5s`, `-1.5m`), which the option's check
#: then refuses with why, instead of argparse's "expected one argument".
_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$|^-\d*\.?\d+[a-z]+$")


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line with exit status 2, like every other bad input."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE  # subcommands' parsers are _Parsers too

    def error(self, message: str) -> NoReturn:
        # In the format `--log-format` asked for, which `main` read ahead of the parse.
        notice(f"conveyor: invalid input: {printable(message)}", level=logging.ERROR)
        self.exit(2)


def cmd_dead(args: argparse.Namespace) -> int:
    # Every dead command reads or acts on dead letters already stored: none creates a
    # database (a mistyped url would otherwise get a new, empty one and "purged 0").
    return run_dead(args, lambda: command_runtime(args, reads_only=True))


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    code: int = run_demo(directory=args.dir, jobs=args.jobs)
    return code


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="conveyor", description="Conveyor: background jobs you can trust.")
    p.add_argument("--version", action="version", version=f"conveyor {__version__}")
    p.add_argument(
        "--config", "-c", help="config file (default: nearest conveyor.toml or [tool.conveyor])"
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,  # `debug` has always worked as well as `DEBUG`
        choices=LOG_LEVELS,
        help="logging level (default INFO)",
    )
    p.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="text lines (default) or one JSON object per line, for log collectors",
    )
    sub = p.add_subparsers(dest="command", required=True)

    # In this order in `conveyor --help`.
    add_worker_command(sub)
    add_enqueue_command(sub)
    add_status_command(sub)
    add_dead_commands(sub, cmd_dead)
    add_maintenance_commands(sub)
    add_job_commands(sub)
    add_workflow_commands(sub)
    add_cron_command(sub)
    add_dashboard_command(sub)

    m = sub.add_parser("demo", help="a realistic mix of jobs on an embedded SQLite file")
    m.add_argument("--dir", default=None, help="where to put the SQLite file (default: a temp dir)")
    m.add_argument("--jobs", type=int, default=40, help="how many ordinary jobs to enqueue")
    m.set_defaults(func=cmd_demo)
    _name_the_commands(p)
    return p


def _name_the_commands(p: argparse.ArgumentParser) -> None:
    """A missing subcommand is told by its choices (`{show,cancel}`), as usage shows
    them, not by the name argparse keeps it under (`job_command`)."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.metavar = action.metavar or "{" + ",".join(action.choices) + "}"
            for command in action.choices.values():
                _name_the_commands(command)


def _asks_for_json(argv: list[str]) -> bool:
    """Whether the command line asks for JSON logs, read before it is parsed, so that a
    refusal of the parse is told in JSON too."""
    for at, item in enumerate(argv):
        if item == "--log-format=json" or (
            item == "--log-format" and argv[at + 1 : at + 2] == ["json"]
        ):
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    """Run one `conveyor` command; its exit code."""
    is_copy = bool(os.environ.get(PROCESS_INDEX_ENV))
    try:
        code = _main(argv)
    except SystemExit as refused:
        if not is_copy or refused.code != INVALID_INPUT_EXIT:
            raise
        code = INVALID_INPUT_EXIT
    # A copy under `worker --processes` tells its supervisor a refusal apart from a
    # job's exit(2), which is a crash to restart.
    return COPY_REFUSED_EXIT if is_copy and code == INVALID_INPUT_EXIT else code


def _main(argv: list[str] | None) -> int:
    # A copy under `worker --processes` says which it is, as the supervisor names it.
    copy = os.environ.get(PROCESS_INDEX_ENV, "")
    use_json(_asks_for_json(list(sys.argv[1:] if argv is None else argv)), copy or None)
    args = parser().parse_args(argv)
    args.raw_argv = list(sys.argv[1:] if argv is None else argv)
    # Like `python -m`, let handler modules next to the config import without PYTHONPATH.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    logging.basicConfig(
        level=args.log_level,
        format=f"%(asctime)s %(levelname)s %(name)s{f' [process {copy}]' if copy else ''}: "
        "%(message)s",
    )
    for handler in logging.getLogger().handlers:
        if args.log_format == "text":  # a JSON log keeps every record, as JSON
            handler.addFilter(WrittenOnTheWay())
        handler.addFilter(REDACTING)
        handler.addFilter(CappedTraceback())  # after the redaction, which renders it
        if args.log_format == "text":
            handler.addFilter(ESCAPING)  # after the redaction, which rewrites the message
        if args.log_format == "json":
            from ..logs import JsonFormatter

            handler.setFormatter(JsonFormatter(process_index=copy or None))
    use_json(args.log_format == "json", copy or None)
    # Python's warnings (a library's deprecation) go through the log, in its format.
    logging.captureWarnings(args.log_format == "json")
    try:
        code: int = args.func(args)
        return code
    except BrokenPipeError:
        # The reader went away (`conveyor jobs list | head`): nothing to report. Point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        # Ctrl-C before a command set its own handlers (a worker still starting).
        notice("conveyor: interrupted", level=logging.WARNING)
        return 130
    except ValidationError as exc:
        notice(f"conveyor: invalid input: {printable(str(exc))}", level=logging.ERROR)
        return 2
    except BackendError as exc:
        notice(f"conveyor: {printable(str(exc))}", level=logging.ERROR)
        return 1
    except Exception as exc:
        # A traceback would print driver messages unredacted; --log-level DEBUG has it, masked.
        log.debug("command failed", exc_info=True)
        refusal = sqlite_refusal(LOADED[0], exc) if LOADED else None
        if refusal is not None:
            notice(f"conveyor: {printable(refusal)}", level=logging.ERROR)
            return 1
        if LOADED and is_outage(exc):
            error = ServerUnreachable.of(endpoint(LOADED[0]), exc)
            notice(f"conveyor: {printable(str(error))}", level=logging.ERROR)
            return 1
        notice(f"conveyor: {type(exc).__name__}: {printable(str(exc))}", level=logging.ERROR)
        return 1
