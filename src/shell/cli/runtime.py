"""What every `conveyor` command shares: the runtime it works on, and one-line input checks.

A command's runtime is built from the same config as `conveyor.build` (`--config
FILE`, or the nearest `conveyor.toml` / `[tool.conveyor]`, then `CONVEYOR_*`
variables). Its URL passwords join the log's redaction as soon as it is read.
Tables of stored text go through `terminal.print_table`, which escapes every cell.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any
from uuid import UUID

from ...core import FieldError, ValidationError
from ...core.validation import check_name, parse_job_id
from ..config import Config, load_config
from ..endpoints import config_secrets
from ..redact import RedactingFilter, redact
from ..runtime import Runtime, build
from ..terminal import TerminalFilter, escape
from .guards import check_cli_config
from .operator import OPERATOR_COMMANDS, without_handlers

#: Masks the config's URL passwords in every log line; filled once the config is read.
REDACTING = RedactingFilter()
#: Shows control characters of stored text escaped in text log lines.
ESCAPING = TerminalFilter()
#: The config the command read, to name its server and key when that server is down.
LOADED: list[Config] = []


def printable(text: str) -> str:
    """`text` on one line: control characters and lone surrogates escaped."""
    return redact(escape(" ".join(text.splitlines())), REDACTING.secrets)


def check(*problems: FieldError | None) -> None:
    errors = [p for p in problems if p is not None]
    if errors:
        raise ValidationError(errors)


#: The most rows a listing command reads (`--limit`): more is a dump, not a listing,
#: and past what every backend's integers hold.
MAX_LIST_LIMIT = 1_000_000


def limit_problem(value: int) -> FieldError | None:
    """What is wrong with a listing's `--limit`, if anything."""
    if value < 0:
        return FieldError("--limit", f"must be >= 0, got {value}")
    if value > MAX_LIST_LIMIT:
        return FieldError("--limit", f"must be at most {MAX_LIST_LIMIT:,}, got {value}")
    return None


def tenant_problem(value: str | None) -> FieldError | None:
    return None if value is None else check_name("--tenant", value)


def job_id_arg(value: str, field: str = "job_id") -> UUID:
    parsed = parse_job_id(value, field)
    if isinstance(parsed, FieldError):
        raise ValidationError((parsed,))
    return parsed


def command_runtime(
    args: argparse.Namespace, startup_timeout_s: float | None = 0.0, *, reads_only: bool = False
) -> Runtime:
    """The runtime of the config. An operator's command tries the server once
    (`startup_timeout_s` 0); a worker waits for it (None: the config's timeout). A
    command that `reads_only` (reads, or acts only on jobs already stored: cancel,
    prune, dead letters) creates no database (see `cli_guards`)."""
    config = load_config(args.config)
    if args.command in OPERATOR_COMMANDS:
        config = without_handlers(config)
    check_cli_config(config, reads_only=reads_only)
    if startup_timeout_s is not None:
        import attrs

        config = attrs.evolve(config, startup_timeout_ms=round(startup_timeout_s * 1000))
    REDACTING.secrets.update(config_secrets(config))
    LOADED[:] = [config]
    return build(config)


def import_extra(module: str, package: str, extra: str) -> Any:
    """Import an optional part of conveyor, or fail in one line naming the extra."""
    try:
        return importlib.import_module(module, __package__)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != package:
            raise
        raise ModuleNotFoundError(
            f"{extra} needs {package}: pip install 'conveyor-jobs[{extra}]'", name=exc.name
        ) from None
