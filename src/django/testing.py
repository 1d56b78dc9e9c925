"""`manage.py test` with Conveyor: Django's test runner, with Conveyor's tables in the
test databases.

    TEST_RUNNER = "conveyor.django.testing.ConveyorTestRunner"

Django's runner makes a test database for each alias and migrates Django's apps
there; Conveyor's tables are not Django models, so they would be missing, and an
enqueue in a test would say to run `conveyor migrate` (which migrates the real
database, not the test one). This runner also:

* gives a SQLite alias whose test database would be in memory a file instead (in a
  temporary folder, removed with it): Conveyor's connections, a worker's or
  `get_result`'s, must see the jobs the test's connection writes;
* runs `conveyor migrate` on each test database a Conveyor backend of `TASKS`
  keeps its tables in (`DATABASE`; a backend on its own `URL` is left alone), as
  soon as Django has migrated it: before `--parallel` copies it for its workers;
* closes this process's Conveyor runtimes before the test databases are
  destroyed: on PostgreSQL a pooled connection still open makes `DROP DATABASE`
  fail ("is being accessed by other users").
"""

from __future__ import annotations

import io
import shutil
import tempfile
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.models.signals import post_migrate
from django.test.runner import DiscoverRunner

from .backend import RUNTIMES, ConveyorBackend
from .compat import task_backends

_UID = "conveyor.django.testing.add_tables"


def conveyor_databases() -> dict[str, str]:
    """The `TASKS` aliases on Conveyor's backend whose tables are in a Django database,
    each with that database's alias."""
    found = {}
    for alias in task_backends.settings:
        backend = task_backends[alias]
        if isinstance(backend, ConveyorBackend) and backend.settings.url is None:
            found[str(alias)] = backend.settings.database or "default"
    return found


class ConveyorTestRunner(DiscoverRunner):  # type: ignore[misc]
    """Django's `DiscoverRunner`, with Conveyor's tables in the test databases."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._folder: str | None = None

    def setup_databases(self, **kwargs: Any) -> Any:
        wanted = conveyor_databases()
        for database in set(wanted.values()):
            self._test_database_on_file(database)
        migrated: set[str] = set()

        def add_tables(sender: Any, using: str = "", **_: Any) -> None:
            # Right after Django migrates a test database, before `--parallel` copies
            # it for each worker: the copies carry Conveyor's tables too.
            if using in migrated or using not in wanted.values():
                return
            migrated.add(using)
            for alias in (a for a, database in wanted.items() if database == using):
                call_command("conveyor", "migrate", backend=alias, stdout=io.StringIO())

        post_migrate.connect(add_tables, weak=False, dispatch_uid=_UID)
        try:
            made = super().setup_databases(**kwargs)
        finally:
            post_migrate.disconnect(dispatch_uid=_UID)
        for alias, database in wanted.items():
            if database not in migrated:  # not migrated by Django this run
                call_command("conveyor", "migrate", backend=alias, stdout=io.StringIO())
        return made

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        RUNTIMES.close()
        try:
            super().teardown_databases(old_config, **kwargs)
        finally:
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)

    def _test_database_on_file(self, database: str) -> None:
        entry = settings.DATABASES.get(database, {})
        if not str(entry.get("ENGINE", "")).endswith("sqlite3"):
            return
        test = entry.setdefault("TEST", {})
        if test.get("NAME") and "mode=memory" not in str(test["NAME"]):
            return  # a file of the project's choosing
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="conveyor-test-db-")
        test["NAME"] = f"{self._folder}/{database}.sqlite3"
        connections[database].settings_dict.setdefault("TEST", {})["NAME"] = test["NAME"]
