"""What a `conveyor` command checks in its config before it builds anything.

Two mistakes cost a first afternoon without a word from the CLI, so it refuses them:

* **The memory provider.** Its jobs live in the memory of one process: `conveyor
  enqueue` would print an id for a job gone when the command exits, and `conveyor
  worker` would poll a queue no other process can fill. Every command that stores or
  reads jobs refuses it (`build`, `drain` and tests in one process keep it).
* **A database that is not there.** On SQLite, opening a missing file creates it,
  so a command that only reads (`status`, `job show`, `jobs list`, `dead list`, `dead
  show`, `cron list`, `dashboard`) pointed at the wrong path would report an empty
  queue from a new, empty file. Those commands say "no database at PATH" instead
  and create nothing.
"""

from __future__ import annotations

from ...core import ValidationError
from ..config import Config
from ..config.paths import sqlite_file
from ..redact import BackendError

#: The providers a command run in its own process can share jobs through.
SHARED = ("db", "redis")


class NoDatabase(BackendError):
    """A read-only command was pointed at a SQLite file that does not exist."""


def check_cli_config(config: Config, *, reads_only: bool = False) -> None:
    """Refuse a config a CLI command cannot use: the memory provider always; with
    `reads_only`, a SQLite database file that does not exist yet."""
    if config.provider == "memory":
        raise ValidationError.of(
            "provider",
            "'memory' keeps jobs inside one process, so a CLI command cannot share them "
            "with any other (an enqueued job is gone when the command exits): use "
            "provider 'db' (SQLite or PostgreSQL) or 'redis'. The memory provider is for "
            "build() and drain() in one process, and for tests",
        )
    if reads_only and config.provider == "db":
        path = sqlite_file(config.url)
        if path is not None and not path.exists():
            raise NoDatabase(
                f"no database at {path.absolute()} (url = {config.url!r}): nothing was "
                "ever written there; check `url` (a relative path in a config file is "
                "read from that file's folder), or enqueue or run `conveyor migrate` first"
            )
