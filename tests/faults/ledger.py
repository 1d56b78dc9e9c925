"""A ledger outside the system under test, and the figures computed from it.

The ledger is its own SQLite file (stdlib `sqlite3`, never Conveyor's adapters),
written by everyone who takes part in a fault run:

* the producer records each enqueue attempt *before* calling the queue and its
  outcome (`ok` / `error`) after: an acknowledged enqueue is one reported ok;
* the failpoint proxy in each worker process records every claim it was handed
  and every fenced write a claim holder made (extend, finish, replace, ack,
  reclaim) with the token and whether the backend accepted it (`op!` when the
  call raised instead), and each lease-keeper scan;
* handlers record each execution's start and end (job key, claim token, pid,
  wall time) and commit their effect idempotently (`INSERT OR IGNORE` into
  `effects`), so the first effect of a job stands and later ones are no-ops.

After every fault is healed and the queue drained, `figures` compares them (as
Jepsen's queue checker does): lost, unexpected, duplicated, overlapping and
stuck work. Wall times come from `time.time()` on one host, so every process
shares one clock.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS enqueues (
    job_id TEXT NOT NULL, try INTEGER NOT NULL, outcome TEXT, error TEXT,
    at REAL NOT NULL, done_at REAL
);
CREATE INDEX IF NOT EXISTS enqueues_job ON enqueues (job_id);
CREATE TABLE IF NOT EXISTS executions (
    id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, token TEXT NOT NULL, pid INTEGER NOT NULL,
    started REAL NOT NULL, ended REAL, failed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS executions_job ON executions (job_id);
CREATE TABLE IF NOT EXISTS effects (
    job_id TEXT PRIMARY KEY, token TEXT NOT NULL, pid INTEGER NOT NULL, at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS writes (
    token TEXT NOT NULL, job_id TEXT NOT NULL, op TEXT NOT NULL, ok INTEGER NOT NULL,
    pid INTEGER NOT NULL, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS writes_token ON writes (token);
CREATE TABLE IF NOT EXISTS deaths (pid INTEGER PRIMARY KEY, at REAL NOT NULL);
"""

#: Fenced writes that release a claim when accepted (`finish` records and releases).
RELEASES = ("ack", "replace", "finish", "start")  # start: the prefetched token is swapped
#: Fenced writes whose rejection proves the holder had lost its lease.
FENCES = ("extend", "replace", "finish")


class Ledger:
    """The ledger file. Safe to share between threads (one connection per thread)
    and processes (WAL, a long busy timeout, autocommit statements)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._conn().executescript(SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        cursor = self._conn().execute(sql, params)
        return int(cursor.lastrowid or 0)

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn().execute(sql, params))

    # ---- the producer -------------------------------------------------------

    def enqueue_attempt(self, job_id: str, attempt: int) -> int:
        """Record an attempt before calling the queue (so a crash leaves a trace)."""
        return self._write(
            "INSERT INTO enqueues (job_id, try, at) VALUES (?, ?, ?)",
            (job_id, attempt, time.time()),
        )

    def enqueue_outcome(self, row: int, error: BaseException | None) -> None:
        outcome = "ok" if error is None else "error"
        text = None if error is None else f"{type(error).__name__}: {error}"[:500]
        self._write(
            "UPDATE enqueues SET outcome = ?, error = ?, done_at = ? WHERE rowid = ?",
            (outcome, text, time.time(), row),
        )

    def enqueue_attempts(self, job_ids: list[str], attempt: int) -> list[int]:
        """`enqueue_attempt` for a batch handed to `enqueue_many`, in one transaction."""
        conn, at = self._conn(), time.time()
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows = [
                int(
                    conn.execute(
                        "INSERT INTO enqueues (job_id, try, at) VALUES (?, ?, ?)",
                        (job_id, attempt, at),
                    ).lastrowid
                    or 0
                )
                for job_id in job_ids
            ]
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return rows

    def enqueue_outcomes(self, rows: list[int], error: BaseException | None) -> None:
        """`enqueue_outcome` for a whole batch: it succeeded or failed as one."""
        outcome = "ok" if error is None else "error"
        text = None if error is None else f"{type(error).__name__}: {error}"[:500]
        at = time.time()
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "UPDATE enqueues SET outcome = ?, error = ?, done_at = ? WHERE rowid = ?",
            [(outcome, text, at, row) for row in rows],
        )
        conn.execute("COMMIT")

    # ---- handlers -----------------------------------------------------------

    def started(self, job_id: str, token: str) -> int:
        return self._write(
            "INSERT INTO executions (job_id, token, pid, started) VALUES (?, ?, ?, ?)",
            (job_id, token, os.getpid(), time.time()),
        )

    def ended(self, execution: int, *, failed: bool = False) -> None:
        self._write(
            "UPDATE executions SET ended = ?, failed = ? WHERE id = ?",
            (time.time(), int(failed), execution),
        )

    def effect(self, job_id: str, token: str) -> bool:
        """Commit the job's effect once. True when this call was the one that did."""
        cursor = self._conn().execute(
            "INSERT OR IGNORE INTO effects (job_id, token, pid, at) VALUES (?, ?, ?, ?)",
            (job_id, token, os.getpid(), time.time()),
        )
        return cursor.rowcount == 1

    def executions_of(self, job_id: str) -> int:
        [(n,)] = self.query("SELECT count(*) FROM executions WHERE job_id = ?", (job_id,))
        return int(n)

    # ---- the failpoint proxy ------------------------------------------------

    def wrote(self, token: str, job_id: str, op: str, ok: bool) -> None:
        self._write(
            "INSERT INTO writes (token, job_id, op, ok, pid, at) VALUES (?, ?, ?, ?, ?, ?)",
            (token, job_id, op, int(ok), os.getpid(), time.time()),
        )

    # ---- the harness --------------------------------------------------------

    def died(self, pid: int) -> None:
        """Worker process `pid` is gone (killed, crashed or exited): its executions
        stopped no later than now."""
        self._write("INSERT OR IGNORE INTO deaths (pid, at) VALUES (?, ?)", (pid, time.time()))

    def deaths(self) -> dict[int, float]:
        return {int(pid): float(at) for pid, at in self.query("SELECT pid, at FROM deaths")}

    # ---- reading ------------------------------------------------------------

    def acknowledged(self) -> set[str]:
        return {r[0] for r in self.query("SELECT job_id FROM enqueues WHERE outcome = 'ok'")}

    def attempted(self) -> set[str]:
        return {r[0] for r in self.query("SELECT job_id FROM enqueues")}

    def effects(self) -> dict[str, str]:
        """job id -> the token whose execution committed the effect."""
        return dict(self.query("SELECT job_id, token FROM effects"))  # type: ignore[arg-type]

    def executions(self, job_id: str | None = None) -> list[Execution]:
        sql = "SELECT job_id, token, pid, started, ended, failed FROM executions"
        rows = self.query(sql + " WHERE job_id = ?", (job_id,)) if job_id else self.query(sql)
        return [Execution(*r) for r in rows]

    def writes(self, token: str | None = None) -> list[Write]:
        sql = "SELECT token, job_id, op, ok, pid, at FROM writes"
        rows = self.query(sql + " WHERE token = ?", (token,)) if token else self.query(sql)
        return [Write(r[0], r[1], r[2], bool(r[3]), r[4], r[5]) for r in rows]

    def wait_for(self, sql: str, params: tuple[Any, ...] = (), *, timeout_s: float = 20) -> Any:
        """Poll until `sql` returns a truthy first cell; return it (or fail loudly)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            rows = self.query(sql, params)
            if rows and rows[0][0]:
                return rows[0][0]
            time.sleep(0.02)
        raise AssertionError(f"ledger never showed {sql!r} {params} within {timeout_s}s")


@dataclass(frozen=True)
class Execution:
    job_id: str
    token: str
    pid: int
    started: float
    ended: float | None
    failed: int


@dataclass(frozen=True)
class Write:
    token: str
    job_id: str
    op: str
    ok: bool
    pid: int
    at: float


@dataclass(frozen=True)
class Figures:
    """What a fault run did, from the ledger and the queue's counts after the drain.

    `overlap` counts pairs of executions of one job where the later one started while
    the earlier was still running *and* still held a live lease (a broken fence);
    `concurrent` counts time overlap alone (expected when a lease ran out under a
    slow job). `unreleased` is the claims their holder never released (a duplicate
    can only come from one of them); `unreleased_on_dead` is those held by workers
    that died: the most duplicates a crash may cause; `lease_lost` is those of live
    workers refused a fenced write because their lease ran out (a handler or an
    outcome write slower than the lease, e.g. on an overloaded host).
    """

    attempted: int
    acknowledged: int
    enqueue_errors: int
    executions: int
    completed: int
    lost: int
    unexpected: int
    duplicates: int
    overlap: int
    concurrent: int
    stuck: int
    unreleased: int
    unreleased_on_dead: int
    lease_lost: int
    lost_ids: frozenset[str] = field(default=frozenset(), repr=False)
    unexpected_ids: frozenset[str] = field(default=frozenset(), repr=False)
    duplicated_ids: frozenset[str] = field(default=frozenset(), repr=False)

    def line(self) -> str:
        return (
            f"attempted={self.attempted} acknowledged={self.acknowledged} "
            f"enqueue_errors={self.enqueue_errors} executions={self.executions} "
            f"completed={self.completed} lost={self.lost} unexpected={self.unexpected} "
            f"duplicates={self.duplicates} (unreleased claims: {self.unreleased}, "
            f"on dead workers: {self.unreleased_on_dead}, lease lost: {self.lease_lost}) "
            f"overlap={self.overlap} concurrent={self.concurrent} stuck={self.stuck}"
        )

    def assert_no_loss(self, *, duplicates_at_most: int | None = None) -> None:
        """lost = unexpected = stuck = overlap = 0; duplicates bounded by the claims that
        crashed workers held (or by `duplicates_at_most`, for outages longer than the
        lease). A live worker's claim never runs twice: healthy workers keep every
        claim they hold leased."""
        default = self.unreleased_on_dead
        bound = default if duplicates_at_most is None else duplicates_at_most
        problems = []
        if self.lost:
            problems.append(f"lost {sorted(self.lost_ids)[:10]}")
        if self.unexpected:
            problems.append(f"unexpected {sorted(self.unexpected_ids)[:10]}")
        if self.stuck:
            problems.append(f"{self.stuck} stuck in processing")
        if self.overlap:
            problems.append(f"{self.overlap} overlapping executions with live leases")
        if self.duplicates > bound:
            problems.append(f"{self.duplicates} duplicates > bound {bound}")
        assert not problems, self.line() + "\n" + "; ".join(problems)


def figures(
    ledger: Ledger,
    *,
    in_flight: int,
    dead_pids: Iterable[int] = (),
    settled: Iterable[str] = (),
) -> Figures:
    """The figures of a run.

    `in_flight` is the queue's in-flight count after the drain (stuck work).
    `dead_pids` are the worker processes that died or were stopped during the run:
    the claims they left unreleased bound the duplicates. `settled` are acknowledged
    jobs whose expected end is a dead letter, not an effect (poison pills).
    """
    dead = set(dead_pids)
    acked = ledger.acknowledged()
    attempted = ledger.attempted()
    effects = ledger.effects()
    runs = ledger.executions()
    writes = ledger.writes()
    [(errors,)] = ledger.query("SELECT count(*) FROM enqueues WHERE outcome = 'error'")

    by_job: dict[str, list[Execution]] = defaultdict(list)
    for run in runs:
        by_job[run.job_id].append(run)
    lost = acked - set(effects) - set(settled)
    unexpected = (set(effects) | set(by_job)) - attempted
    duplicated = {job for job, rs in by_job.items() if len(rs) > 1}
    duplicates = sum(len(rs) - 1 for rs in by_job.values())

    live_until = _live_until(writes)
    deaths = ledger.deaths()
    overlap = concurrent = 0
    for rs in by_job.values():
        rs = sorted(rs, key=lambda r: r.started)
        for i, first in enumerate(rs):
            # An execution stops when its handler returns or its process dies.
            end = first.ended if first.ended is not None else deaths.get(first.pid, math.inf)
            live = min(end, live_until.get(first.token, math.inf) if first.token else end)
            for later in rs[i + 1 :]:
                if later.started < end:
                    concurrent += 1
                if later.started < live:
                    overlap += 1

    claims = [w for w in writes if w.op == "claim"]
    released = {w.token for w in writes if w.op in RELEASES and w.ok}
    unreleased = [c for c in claims if c.token not in released]
    refused = {w.token for w in writes if w.op in FENCES and not w.ok}
    return Figures(
        attempted=len(attempted),
        acknowledged=len(acked),
        enqueue_errors=int(errors),
        executions=len(runs),
        completed=len(set(effects) & attempted),
        lost=len(lost),
        unexpected=len(unexpected),
        duplicates=duplicates,
        overlap=overlap,
        concurrent=concurrent,
        stuck=in_flight,
        unreleased=len(unreleased),
        unreleased_on_dead=sum(1 for c in unreleased if c.pid in dead),
        lease_lost=sum(1 for c in unreleased if c.pid not in dead and c.token in refused),
        lost_ids=frozenset(lost),
        unexpected_ids=frozenset(unexpected),
        duplicated_ids=frozenset(duplicated),
    )


def _live_until(writes: Iterable[Write]) -> Mapping[str, float]:
    """When each claim token stopped holding a live lease: released by its holder,
    reclaimed by a lease keeper, or first refused a fenced write. A token missing
    here never stopped (its lease is live for ever, as far as the ledger knows)."""
    ends: dict[str, float] = {}
    for w in writes:
        stopped = (
            (w.op in RELEASES and w.ok)
            or (w.op == "reclaim" and w.ok)
            or (w.op in FENCES and not w.ok)
        )
        if stopped:
            ends[w.token] = min(ends.get(w.token, math.inf), w.at)
    return ends
