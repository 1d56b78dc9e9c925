"""`migrate` from several processes at once on a new database (a deploy starting
every worker with `auto_migrate = true`, or two `conveyor migrate` runs): one
creates the schema and the others find it current. On PostgreSQL the tables were
created before the advisory lock was taken, and the losers failed with a duplicate
relation; SQLite serialised them already."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

#: Each process waits until this moment, then migrates: the runs overlap.
SCRIPT = """
import sys, time
from conveyor.shell.adapters.sql import make_engine
from conveyor.shell.adapters.sql.migration import migrate
url, at = sys.argv[1], float(sys.argv[2])
engine = make_engine(url)
time.sleep(max(0.0, at - time.time()))
print("ran DDL" if migrate(engine) else "current")
"""


def _race(url: str, processes: int) -> list[subprocess.CompletedProcess[str]]:
    at = time.time() + 1.5  # all started and imported by then
    running = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, url, str(at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    out = []
    for process in running:
        stdout, stderr = process.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return out


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_processes_migrating_a_new_database_at_once_all_succeed_one_creating_it(
    backend: str, tmp_path: Path
) -> None:
    for round_ in range(3):
        if backend == "postgresql":
            from conveyor.testing.postgres_server import fresh_database

            url = fresh_database(prefix="conveyor_migrate_race")
        else:
            url = f"sqlite:///{tmp_path / f'race{round_}.db'}"
        runs = _race(url, 3)
        failed = [run.stderr[-400:] for run in runs if run.returncode != 0]
        assert not failed, failed
        said = sorted(run.stdout.strip() for run in runs)
        assert said == ["current", "current", "ran DDL"], said


def test_a_schema_of_another_version_says_a_newer_conveyor_may_have_migrated_it(
    tmp_path: Path,
) -> None:
    from conveyor.shell.adapters.sql import make_engine
    from conveyor.shell.adapters.sql.migration import migrate, schema_problem

    engine = make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    migrate(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("PRAGMA user_version = 12345")  # as another version marks it
    problem = schema_problem(engine)
    assert problem is not None and 'run "conveyor migrate"' in problem
    assert problem.endswith("if a newer Conveyor migrated it, run that one instead")
    engine.dispose()
