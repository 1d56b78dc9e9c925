"""SQLite wake-ups heard from the kernel: a commit by another connection wakes the
process's waiters as it lands (inotify, Linux), not at the listener's next timed look;
where the kernel cannot tell, the timed look stands alone."""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conveyor.shell.adapters.sql import SqlJobQueue, make_engine, wakeups
from conveyor.shell.adapters.sql.file_changes import FileChanges
from conveyor.shell.adapters.sql.migration import create_tables
from test_sql_backend import make_job

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="inotify is Linux's; elsewhere the timer alone"
)


@pytest.fixture
def waiter(tmp_path: Path) -> Iterator[SqlJobQueue]:
    """A queue on `tmp_path / "jobs.db"`, its tables made, for an idle worker's waits."""
    engine = make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    create_tables(engine)
    queue = SqlJobQueue(engine)
    yield queue
    queue.close()
    engine.dispose()


@linux_only
def test_a_write_to_the_database_or_its_wal_is_heard_and_other_files_are_not(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    sqlite3.connect(path).close()
    changes = FileChanges.open(str(path))
    assert changes is not None
    try:
        assert changes.wait(0.01) is False
        (tmp_path / "notes.txt").write_text("not the database")
        assert changes.wait(0.05) is False
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
        assert changes.wait(1.0) is True
        assert changes.written() is False, "what was heard is read once"
        conn.execute("INSERT INTO t VALUES (1)")
        conn.commit()
        assert changes.written() is True
        conn.close()
    finally:
        changes.close()


def test_no_watch_for_a_database_that_is_no_file(tmp_path: Path) -> None:
    assert FileChanges.open(":memory:") is None
    assert FileChanges.open("") is None
    assert FileChanges.open(str(tmp_path / "not-yet.db")) is None


@linux_only
def test_a_waiter_hears_another_connections_commit_as_it_lands_not_at_the_next_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, waiter: SqlJobQueue
) -> None:
    # The timed look comes every 30 s here: only the kernel's report can wake the
    # waiter within the 10 s it waits.
    monkeypatch.setattr(wakeups, "SQLITE_WATCH_S", 30.0)
    other = make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    producer = SqlJobQueue(other)
    woke: list[tuple[bool, float]] = []
    thread = threading.Thread(
        target=lambda: woke.append((waiter.wait_for_work("default", 10.0), time.monotonic()))
    )
    thread.start()
    time.sleep(0.5)  # the listener is up and in its wait
    committed = time.monotonic()
    producer.enqueue(make_job())
    thread.join(15)
    [(heard, at)] = woke
    assert heard is True
    assert at - committed < 5.0
    producer.close()
    other.dispose()


@linux_only
def test_a_database_reached_through_a_symlink_is_heard_where_it_is_written(
    tmp_path: Path,
) -> None:
    (tmp_path / "data").mkdir()
    real = tmp_path / "data" / "jobs.db"
    sqlite3.connect(real).close()
    link = tmp_path / "link.db"
    link.symlink_to(real)
    changes = FileChanges.open(str(link))
    assert changes is not None
    try:
        conn = sqlite3.connect(link)
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
        conn.close()
        assert changes.wait(1.0) is True
    finally:
        changes.close()


@linux_only
def test_a_database_written_without_pause_is_looked_at_no_more_often_than_the_gap_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, waiter: SqlJobQueue
) -> None:
    # A gap of 2 ms (500 looks a second) rather than the 0.5 ms default: a writer on a
    # busy machine still commits more often than that, so the test can tell.
    monkeypatch.setattr(wakeups, "SQLITE_LOOK_GAP_S", 0.002)
    looks: list[float] = []
    real = wakeups.Wakeups._announce_finished

    def counted(self: wakeups.Wakeups, cursor: object) -> None:
        looks.append(time.monotonic())
        real(self, cursor)

    monkeypatch.setattr(wakeups.Wakeups, "_announce_finished", counted)
    writer = sqlite3.connect(tmp_path / "jobs.db", isolation_level=None)
    writer.execute("CREATE TABLE churn (x)")
    stop = threading.Event()

    def wait_all_along() -> None:  # an idle worker: it waits again after each wake-up
        while not stop.is_set():
            waiter.wait_for_work("default", 0.05)

    waiting = threading.Thread(target=wait_all_along)
    waiting.start()
    time.sleep(0.2)  # the listener is up
    commits = 0
    began = time.monotonic()
    while time.monotonic() - began < 1.0:
        writer.execute("INSERT INTO churn VALUES (1)")  # one commit each (autocommit)
        commits += 1
    stop.set()
    looked = [t for t in looks if began + 0.1 <= t <= began + 1.0]
    waiting.join(5)
    writer.close()
    if commits < 1000:
        pytest.skip(f"the writer committed {commits} times in 1 s here: too few to tell")
    assert len(looked) <= 0.9 * 500 * 1.1, f"{len(looked)} looks in 0.9 s, {commits} commits"
