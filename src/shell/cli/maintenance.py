"""`conveyor migrate` and `conveyor prune`: the schema, and finished records past retention."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from ...core import ValidationError
from ..config import load_config
from ..endpoints import config_secrets
from .runtime import REDACTING, command_runtime

log = logging.getLogger("conveyor.cli")


def add_maintenance_commands(sub: Any) -> None:
    """The `migrate` and `prune` commands, on the CLI's subparsers `sub`."""
    mg = sub.add_parser(
        "migrate", help="create or upgrade the database schema (the only command that runs DDL)"
    )
    mg.add_argument(
        "--sql", action="store_true", help="print the SQL to apply by hand instead of running it"
    )
    mg.set_defaults(func=cmd_migrate)

    pr = sub.add_parser(
        "prune", help="delete completed and dead-letter records past their retention"
    )
    pr.add_argument(
        "--older-than",
        default=None,
        help="prune records finished longer ago than this (7d, 12h, 30m, 90s), "
        "instead of the configured retention.completed_ms / retention.dead_ms",
    )
    pr.add_argument("--dry-run", action="store_true", help="only count what would go")
    pr.set_defaults(func=cmd_prune)


def cmd_prune(args: argparse.Namespace) -> int:
    from ...core import parse_duration_ms
    from ...core.field_checks import MAX_DURATION_MS

    older_than = None
    if args.older_than is not None:
        older_than = parse_duration_ms(args.older_than)
        if older_than is None:
            example = "a duration such as 7d, 12h, 30m or 90s"
            if args.older_than.strip().startswith("-"):
                example = "a duration of at least 0 (the age of a record to prune), such as 7d"
            raise ValidationError.of("--older-than", f"must be {example}, got {args.older_than!r}")
        if older_than > MAX_DURATION_MS:
            raise ValidationError.of(
                "--older-than", f"must be at most 100 years, got {args.older_than}"
            )
        if args.older_than.strip().isdigit():
            # Deprecated: on a command that deletes, "7" read as seconds is easily meant
            # as days. Taken as before for now, with a warning.
            log.warning(
                "prune --older-than %s is read as %s seconds; give the unit (%ss, %sd): "
                "a bare number will be refused in a later release",
                *(args.older_than.strip(),) * 4,
            )
    runtime = command_runtime(args, reads_only=True)  # prunes only what is stored
    try:
        count = runtime.prune(older_than_ms=older_than, dry_run=args.dry_run)
    finally:
        runtime.close()
    print(f"would prune {count} records" if args.dry_run else f"pruned {count} records")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from ..migrate import migrate_unguarded, migration_sql

    config = load_config(args.config)
    REDACTING.secrets.update(config_secrets(config))
    if args.sql and config.provider == "db":
        print(migration_sql(config).rstrip("\n"))
    else:
        from ..runtime.backends import reachable

        # Tried once, as every operator command: a server that is down is told as
        # unreachable, with what to do, not as the driver's error.
        print(f"conveyor: {reachable(config, 0.0, lambda: migrate_unguarded(config))}")
    return 0
