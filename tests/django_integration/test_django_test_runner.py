"""`manage.py test` on a project whose tasks run on Conveyor, with
`TEST_RUNNER = "conveyor.django.testing.ConveyorTestRunner"`: the test databases get
Conveyor's tables (an in-memory SQLite one becomes a file), a `TransactionTestCase`
enqueues and reads results, and the run ends cleanly on PostgreSQL, whose test
database is dropped while Conveyor's pool held connections to it. A small project,
written into the test's folder, run in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from probe_apps import APPS

SETTINGS = (
    """
import os
import django
"""
    + APPS
    + """if os.environ.get("PROBE_PG_NAME"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ["PROBE_PG_NAME"],
            "USER": os.environ["PROBE_PG_USER"],
            "PASSWORD": os.environ.get("PROBE_PG_PASSWORD", ""),
            "HOST": os.environ["PROBE_PG_HOST"],
            "PORT": os.environ["PROBE_PG_PORT"],
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.path.join(os.environ["PROBE_DIR"], "probe.db"),
        }
    }
TASKS = {"default": {"BACKEND": "conveyor.django.ConveyorBackend", "QUEUES": ["default"]}}
TEST_RUNNER = "conveyor.django.testing.ConveyorTestRunner"
"""
)

TASKS = """
try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task
def noted():
    return "ran"
"""

TESTS = """
from django.db import connection, transaction
from django.test import TransactionTestCase

from probe.tasks import noted


class EnqueueTests(TransactionTestCase):
    def test_a_rolled_back_enqueue_leaves_no_job_and_a_committed_one_is_read(self):
        before = len(noted.get_backend().runtime.list_jobs())
        try:
            with transaction.atomic():
                noted.enqueue()
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        result = noted.enqueue()
        read = noted.get_backend().get_result(result.id)
        self.assertEqual(str(read.status), "READY")
        # Conveyor's tables are not flushed between tests: count this test's jobs.
        self.assertEqual(len(noted.get_backend().runtime.list_jobs()), before + 1)
        # The jobs are in the test database, not the project's.
        self.assertTrue(connection.settings_dict["NAME"] != "probe-real")
"""


def _project(folder: Path, copies: int = 1) -> Path:
    app = folder / "probe"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text(TASKS)
    more = [f"\n\nclass EnqueueTests{n}(EnqueueTests):\n    pass\n" for n in range(1, copies)]
    (app / "tests.py").write_text(TESTS + "".join(more))
    (folder / "probe_settings.py").write_text(SETTINGS)
    return folder


def _test_command(
    folder: Path, *flags: str, **env: str
) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "django", "test", "probe", "-v", "1", *flags],
        cwd=folder,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "probe_settings",
            "PROBE_DIR": str(folder),
            "PYTHONPATH": path,
            **env,
        },
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_manage_py_test_runs_on_sqlite_with_its_in_memory_test_database(tmp_path: Path) -> None:
    # Without the runner: conveyor.E002 (the test database is in memory) ended the run.
    done = _test_command(_project(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Ran 1 test" in done.stderr and "OK" in done.stderr
    assert not (tmp_path / "probe.db").exists(), "nothing was written to the real database"


def test_manage_py_test_runs_on_postgresql_and_drops_its_test_database(tmp_path: Path) -> None:
    # Without the runner: "run conveyor migrate" (which migrates the real database),
    # then, with the tables made, "database ... is being accessed by other users".
    from conveyor.testing.postgres_server import fresh_database
    from sqlalchemy import make_url

    url = make_url(fresh_database(prefix="conveyor_django_runner"))
    done = _test_command(
        _project(tmp_path),
        PROBE_PG_NAME=str(url.database),
        PROBE_PG_USER=str(url.username),
        PROBE_PG_PASSWORD=str(url.password or ""),
        # A socket folder arrives as the URL's `host` parameter.
        PROBE_PG_HOST=str(url.host or url.query.get("host") or ""),
        PROBE_PG_PORT=str(url.port or ""),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Ran 1 test" in done.stderr and "OK" in done.stderr
    assert "ObjectInUse" not in done.stderr


def test_manage_py_test_runs_in_parallel_each_copy_with_conveyors_tables(tmp_path: Path) -> None:
    # Django copied the test database for each worker before Conveyor's tables were
    # made: every test failed with "the database schema is missing".
    done = _test_command(_project(tmp_path, copies=3), "--parallel", "2")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Ran 3 tests" in done.stderr and "OK" in done.stderr


def test_without_the_runner_each_failure_names_the_runner_to_set(tmp_path: Path) -> None:
    # On SQLite, conveyor.E002 said only that an in-memory database cannot hold the
    # tables; on PostgreSQL the error said to run `conveyor migrate`, which migrates the
    # real database, not the test one.
    from conveyor.testing.postgres_server import fresh_database
    from sqlalchemy import make_url

    own = ("--testrunner", "django.test.runner.DiscoverRunner")
    (tmp_path / "sqlite").mkdir()
    (tmp_path / "postgresql").mkdir()
    on_sqlite = _test_command(_project(tmp_path / "sqlite"), *own)
    assert on_sqlite.returncode != 0
    assert "conveyor.E002" in on_sqlite.stderr, on_sqlite.stderr[-4000:]
    assert 'unless TEST_RUNNER = "conveyor.django.testing.ConveyorTestRunner"' in (
        on_sqlite.stderr
    )
    url = make_url(fresh_database(prefix="conveyor_django_runner"))
    on_postgresql = _test_command(
        _project(tmp_path / "postgresql"),
        *own,
        PROBE_PG_NAME=str(url.database),
        PROBE_PG_USER=str(url.username),
        PROBE_PG_PASSWORD=str(url.password or ""),
        PROBE_PG_HOST=str(url.host or url.query.get("host") or ""),
        PROBE_PG_PORT=str(url.port or ""),
    )
    assert on_postgresql.returncode != 0
    assert "manage.py conveyor migrate" in on_postgresql.stderr, on_postgresql.stderr[-4000:]
    assert "in `manage.py test`, set TEST_RUNNER = 'conveyor.django.testing.ConveyorTestRunner'" in (
        on_postgresql.stderr
    )
