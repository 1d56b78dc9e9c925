"""A SQLite database deleted or replaced under a running worker.

SQLite keeps a deleted file open for the processes that had it, so such a worker
went on claiming from a database no one else could see: every job enqueued since
(into the new file at the same path) waited for ever, while the worker looked
healthy. A worker that finds its file gone stops gracefully and exits to be
started again (`RECYCLED_EXIT`), which opens the database now at the path; under
`--processes` its supervisor starts the fresh copy at once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
import pytest
from cli_support import CONVEYOR, HANDLERS, process_env
from conveyor.shell.adapters.sql import make_engine
from conveyor.shell.adapters.sql.database_file import DatabaseFile, DatabaseFileLost
from conveyor.shell.adapters.sql.migration import migrate
from conveyor.shell.worker.signals import RECYCLED_EXIT
from sqlalchemy.exc import OperationalError


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "cli_handlers.py").write_text(HANDLERS)  # `ship` writes its args out
    (tmp_path / "conveyor.toml").write_text(
        textwrap.dedent(f"""
        provider = "db"
        url = "sqlite:///{tmp_path / "jobs.db"}"
        handlers = ["cli_handlers:HANDLERS"]
        entry_points = false
        [workers]
        poll_interval_ms = 20
        """)
    )
    return tmp_path


def _enqueue(project: Path, n: int) -> None:
    # A new file at the path is created and migrated here, as `conveyor enqueue` would.
    runtime = conveyor.build(
        {"provider": "db", "url": f"sqlite:///{project / 'jobs.db'}", "entry_points": False},
        env={},
    )
    try:
        runtime.enqueue("ship", {"n": n})
    finally:
        runtime.close()


def _ran(project: Path) -> list[int]:
    out = project / "out.jsonl"
    lines = out.read_text().splitlines() if out.exists() else []
    return [json.loads(line)["n"] for line in lines]


def _until(done: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _delete(path: Path) -> None:
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):
        (path.parent / name).unlink(missing_ok=True)


def _replace(path: Path) -> None:
    # A restore from a copy: another file moved onto the path.
    other = path.with_name("restored.db")
    other.write_bytes(b"")
    os.replace(other, path)
    _delete(path.with_name("jobs.db-wal"))


@pytest.mark.parametrize(("lose", "told"), [(_delete, "deleted"), (_replace, "replaced")])
def test_a_worker_whose_database_file_is_lost_stops_to_be_started_again(
    project: Path, lose: Callable[[Path], None], told: str
) -> None:
    _enqueue(project, 1)
    worker = subprocess.Popen(
        [*CONVEYOR, "worker"], cwd=project, env=process_env(project), stderr=subprocess.PIPE, text=True
    )
    try:
        _until(lambda: _ran(project) == [1], "the worker ran the first job")
        lose(project / "jobs.db")
        code = worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    stderr = worker.stderr.read() if worker.stderr else ""
    assert code == RECYCLED_EXIT, stderr
    assert f"the SQLite database {project / 'jobs.db'} was {told}" in stderr, stderr


def test_under_a_supervisor_the_fresh_copy_runs_what_the_new_file_holds(project: Path) -> None:
    _enqueue(project, 1)
    supervisor = subprocess.Popen(
        [*CONVEYOR, "worker", "--processes", "2"],
        cwd=project,
        env=process_env(project),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _until(lambda: _ran(project) == [1], "the worker ran the first job")
        _delete(project / "jobs.db")
        _enqueue(project, 2)  # into a new file at the same path
        _until(lambda: _ran(project) == [1, 2], "the job in the new file ran")
    finally:
        supervisor.send_signal(signal.SIGTERM)
        code = supervisor.wait(timeout=60)
    assert code == 0, supervisor.stderr.read() if supervisor.stderr else ""


def test_a_file_is_lost_only_when_its_path_no_longer_names_it(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    path.write_bytes(b"")
    kept = DatabaseFile(str(path))
    assert kept.lost() is None
    path.write_bytes(b"more")  # written, not replaced
    assert kept.lost() is None
    path.unlink()
    assert kept.lost() == f"the SQLite database {path} was deleted"
    not_yet = DatabaseFile(str(tmp_path / "later.db"))
    assert not_yet.lost() is None, "a file not created yet is not lost: it is known once seen"
    (tmp_path / "later.db").write_bytes(b"")
    assert not_yet.lost() is None
    (tmp_path / "other.db").write_bytes(b"")
    os.replace(tmp_path / "other.db", tmp_path / "later.db")
    assert not_yet.lost() == (
        f"the SQLite database {tmp_path / 'later.db'} was replaced while in use (its -wal "
        "and -shm files are the old one's: stop every process before replacing it)"
    )


def test_a_process_that_opened_its_database_never_creates_an_empty_one_in_its_place(
    tmp_path: Path,
) -> None:
    # A connection opened after the file was deleted (the wake-up watcher starting
    # again, the pool growing) made a new empty file at the path, with no tables in
    # it: a worker whose file was deleted then reported it "replaced".
    path = tmp_path / "jobs.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        migrate(engine)
        engine.dispose()  # what is pooled keeps the old file; the next connect is new
        _delete(path)
        with pytest.raises(OperationalError, match="unable to open database file"):
            engine.connect().close()
        assert not path.exists(), "a new connection made a file at the path"
        replaced = make_engine(f"sqlite:///{tmp_path / 'restored.db'}")
        migrate(replaced)
        replaced.dispose()
        os.replace(tmp_path / "restored.db", path)
        with engine.connect() as conn:  # a file moved onto the path opens as before
            assert conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
    finally:
        engine.dispose()


def test_a_database_not_created_yet_is_created_by_the_first_connection(tmp_path: Path) -> None:
    path = tmp_path / "first.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        migrate(engine)
        assert path.is_file()
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "write",
    [
        lambda rt: rt.enqueue("ship", {"n": 3}),
        lambda rt: rt.enqueue_many("ship", [{"n": 3}, {"n": 4}]),
        lambda rt: rt.enqueue("ship", {"n": 3}, unique_key="ship:3"),
    ],
    ids=["enqueue", "enqueue_many", "unique"],
)
def test_an_enqueue_into_a_lost_database_file_is_refused_not_written_where_no_one_looks(
    tmp_path: Path, write: Callable[[Any], object]
) -> None:
    # A web process keeps its pooled connections on the file it opened: with that file
    # deleted or replaced, its enqueues went on succeeding, into a file no worker
    # would ever open again.
    path = tmp_path / "jobs.db"
    web = conveyor.build(
        {"provider": "db", "url": f"sqlite:///{path}", "entry_points": False, "workers": {"count": 0}},
        env={},
    )
    try:
        web.enqueue("ship", {"n": 1})
        _delete(path)
        with pytest.raises(DatabaseFileLost, match=re.escape(f"the SQLite database {path} was deleted")):
            write(web)
        _enqueue(tmp_path, 2)  # the new file at the path, made by another process
        with pytest.raises(DatabaseFileLost, match=r"was replaced.*start the process again"):
            write(web)
    finally:
        web.close()
    fresh = conveyor.build(
        {"provider": "db", "url": f"sqlite:///{path}", "entry_points": False, "workers": {"count": 0}},
        env={},
    )
    try:
        assert [view.job.args["n"] for view in fresh.list_jobs()] == [2], "only the new file's job"
    finally:
        fresh.close()


def test_a_file_deleted_before_the_first_enqueue_is_lost_too(tmp_path: Path) -> None:
    # The file is made by the build's migration, after the queue was made: it counts
    # as seen from its first connection, not from the first look at the path.
    path = tmp_path / "jobs.db"
    web = conveyor.build(
        {"provider": "db", "url": f"sqlite:///{path}", "entry_points": False, "workers": {"count": 0}},
        env={},
    )
    try:
        _delete(path)
        with pytest.raises(DatabaseFileLost, match="was deleted"):
            web.enqueue("ship", {"n": 1})
    finally:
        web.close()


def test_a_path_that_begins_with_two_slashes_opens_again(tmp_path: Path) -> None:
    # `sqlite:////` + an absolute path keeps both slashes; as a URI, `file://tmp/...`
    # would name a host.
    engine = make_engine(f"sqlite:////{tmp_path / 'jobs.db'}")
    try:
        assert str(engine.url.database).startswith("//")
        migrate(engine)
        engine.dispose()
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
    finally:
        engine.dispose()
