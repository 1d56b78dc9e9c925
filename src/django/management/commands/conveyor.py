"""`manage.py conveyor ...`: the `conveyor` command line on the project's backend.

    python manage.py conveyor migrate
    python manage.py conveyor worker --concurrency 4
    python manage.py conveyor --backend other status

Every `conveyor` command works (docs/cli.md lists them); the config is the one the
backend makes from `TASKS` and `DATABASES` (docs/django.md), and a worker runs the
project's tasks (`conveyor.django.handlers`). `--backend ALIAS` picks the `TASKS`
entry when more than one uses Conveyor; `--traceback` before the conveyor command
shows the traceback of a `CommandError`, as for any Django command.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...compat import task_backends
from ...config_file import written_config
from ...handlers import BACKEND_ENV, backend_alias


class Command(BaseCommand):  # type: ignore[misc]
    help = "Run a conveyor command (worker, migrate, status, ...) on this project's backend."
    # `conveyor migrate` must run where the checks would warn of the missing tables.
    requires_system_checks: list[str] = []

    def run_from_argv(self, argv: list[str]) -> None:
        """Hand everything after `conveyor` to Conveyor's own parser, `--help` included.
        A `CommandError` ends it as Django ends any command's: one line on stderr and
        its status, the traceback only with a leading `--traceback`."""
        conveyor_argv, traceback = _without_traceback(argv[2:])
        try:
            code = self.run_conveyor(conveyor_argv)
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
            with written_config(backend.conveyor_config()) as path:
                return int(main(["--config", str(path), *argv]))
        finally:
            if before is None:
                os.environ.pop(BACKEND_ENV, None)
            else:
                os.environ[BACKEND_ENV] = before


def _without_traceback(argv: list[str]) -> tuple[list[str], bool]:
    """`argv` without Django's `--traceback` among its leading options (before the
    conveyor command, whose own options may hold a `--traceback` of their own), and
    whether it was there."""
    rest, shown, i = list(argv), False, 0
    while i < len(rest):
        if rest[i] == "--traceback":
            del rest[i]
            shown = True
        elif rest[i] == "--backend":
            i += 2
        else:
            break
    return rest, shown
