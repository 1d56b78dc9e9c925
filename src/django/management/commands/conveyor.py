"""`manage.py conveyor ...`: the `conveyor` command line on the project's backend.

    python manage.py conveyor migrate
    python manage.py conveyor worker --concurrency 4
    python manage.py conveyor --backend other status

Every `conveyor` command works (docs/cli.md lists them); the config is the one the
backend makes from `TASKS` and `DATABASES` (docs/django.md), and a worker runs the
project's tasks (`conveyor.django.handlers`). `--backend ALIAS` picks the `TASKS`
entry when more than one uses Conveyor; Django's standard options (`--settings`,
`--pythonpath`, `--traceback`, `--verbosity`, `--no-color`, `--force-color`) are
taken wherever they stand, as for any Django command.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...cli_enqueue import enqueue_command
from ...compat import task_backends
from ...config_file import written_config
from ...handlers import BACKEND_ENV, backend_alias


class Command(BaseCommand):  # type: ignore[misc]
    help = "Run a conveyor command (worker, migrate, status, ...) on this project's backend."
    # `conveyor migrate` must run where the checks would warn of the missing tables.
    requires_system_checks: list[str] = []

    def run_from_argv(self, argv: list[str]) -> None:
        """Hand everything after `conveyor` to Conveyor's own parser, `--help` included,
        but Django's standard options and `--backend` (`_split_argv`). A
        `CommandError` ends it as Django ends any command's: one line on stderr and
        its status, the traceback only with `--traceback`."""
        conveyor_argv, traceback, backend = _split_argv(argv[2:])
        try:
            code = self.run_conveyor(
                ["--backend", backend, *conveyor_argv] if backend else conveyor_argv
            )
        except CommandError as exc:
            if traceback:
                raise
            self.stderr.write(f"{type(exc).__name__}: {exc}")
            sys.exit(exc.returncode)
        sys.exit(code)

    def add_arguments(self, parser: Any) -> None:
        # Only `call_command` parses these: `manage.py conveyor` hands its argv over whole.
        parser.add_argument("--backend", default=None, help="the TASKS alias")
        parser.add_argument("conveyor_args", nargs=argparse.REMAINDER)

    def handle(self, *args: Any, **options: Any) -> None:
        backend = options.get("backend")
        argv = list(options.get("conveyor_args") or args)
        code = self.run_conveyor(["--backend", backend, *argv] if backend else argv)
        if code:
            raise CommandError(f"conveyor exited with status {code}", returncode=code)

    def run_conveyor(self, argv: list[str]) -> int:
        from ....shell.cli import main

        before = os.environ.get(BACKEND_ENV)
        if argv[:1] == ["--backend"] and len(argv) >= 2:
            os.environ[BACKEND_ENV] = argv[1]
            argv = argv[2:]
        try:
            try:
                alias = backend_alias()
                backend = task_backends[alias]
            except Exception as exc:
                raise CommandError(str(exc)) from exc
            # Worker copies under `--processes` read the same alias from the environment.
            os.environ[BACKEND_ENV] = alias
            if _command(argv) == "enqueue":
                # A task's call goes through its backend, as `task.enqueue` would.
                try:
                    print(enqueue_command(argv[argv.index("enqueue") + 1 :], backend))
                except ValueError as exc:
                    raise CommandError(f"enqueue: {exc}", returncode=2) from exc
                return 0
            with written_config(backend.conveyor_config()) as path:
                return int(main(["--config", str(path), *argv]))
        finally:
            if before is None:
                os.environ.pop(BACKEND_ENV, None)
            else:
                os.environ[BACKEND_ENV] = before


#: Django's options of every command, with whether each takes a value. `manage.py`
#: has applied `--settings` and `--pythonpath` already, wherever they stand; the rest
#: concern Django's own output, which here is one error line at most.
DJANGO_OPTIONS = {
    "--settings": True,
    "--pythonpath": True,
    "--verbosity": True,
    "-v": True,
    "--no-color": False,
    "--force-color": False,
    "--traceback": False,
}
#: Conveyor commands with a `--traceback` of their own (`job show --traceback`
#: prints each attempt's traceback): after them, it is theirs.
OWN_TRACEBACK = frozenset({"job"})
#: Conveyor's options before its command that take a value (not a command's name).
VALUED = [["--config"], ["-c"], ["--log-level"], ["--log-format"]]


def _split_argv(argv: list[str]) -> tuple[list[str], bool, str | None]:
    """`argv` without Django's standard options and `--backend` (in either form,
    `--backend X` or `--backend=X`, anywhere Django would take them: Conveyor's
    commands have none of these names), whether `--traceback` was among them, and the
    `--backend` given."""
    rest: list[str] = []
    traceback, backend, command = False, None, None
    items = iter(argv)
    for item in items:
        name, eq, value = item.partition("=")
        if item == "--":
            rest.extend([item, *items])
        elif name == "--backend":
            backend = value if eq else next(items, None)
            if backend is None:  # no alias after it: Conveyor's parser says so
                rest.append(item)
        elif item.startswith("-v") and len(item) > 2:
            pass  # `-v2`: the short option with its value attached
        elif name in DJANGO_OPTIONS and (name != "--traceback" or command not in OWN_TRACEBACK):
            traceback = traceback or name == "--traceback"
            if DJANGO_OPTIONS[name] and not eq:
                next(items, None)
        else:
            rest.append(item)
            command = command or _command(rest)
    return rest, traceback, backend


def _command(argv: list[str]) -> str | None:
    """The conveyor command `argv` runs (its first word that is no option's value)."""
    for at, item in enumerate(argv):
        if not item.startswith("-") and argv[at - 1 : at] not in VALUED:
            return item
    return None
