"""Retention: finished records are pruned on every backend, by age and by count.

Each case runs on memory, SQLite, PostgreSQL and Redis (the `backend` fixture).
The order a prune carries out is computed by the core (`prune_order`); the adapters
only enforce it, re-checking each record's guards inside their atomic write.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from backends import REDIS_TEST_DB, Backend, make_backend
from conveyor.core import (
    ErrorInfo,
    Job,
    JobStatus,
    PruneOrder,
    RetentionPolicy,
    decide_revive,
    parse_duration_ms,
    prune_order,
)
from conveyor.shell.config import parse_config
from conveyor.shell.executor import Executor
from conveyor.shell.registry import Registry
from conveyor.shell.retention import Pruner, prune_all
from conveyor.shell.worker.loop import Worker
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job

DAY = timedelta(days=1)
NOW = T0 + 100 * DAY


def _finished(status: JobStatus, at: datetime, **options: Any) -> Job:
    job = make_job(**options)
    error = ErrorInfo("boom", "it broke") if status is JobStatus.FAILED else None
    return attrs.evolve(job, status=status, finished_at=at, attempt=1, last_error=error)


def _record(b: Backend, status: JobStatus, at: datetime, **options: Any) -> Job:
    job = _finished(status, at, **options)
    b.store.record(job)
    return job


def _ids(jobs: list[Job]) -> set[Any]:
    return {job.id for job in jobs}


def _kept(b: Backend, status: JobStatus) -> set[Any]:
    return _ids(list(b.store.list_history(status=status, limit=10_000)))


def _order(policy: RetentionPolicy = RetentionPolicy(), **kw: Any) -> PruneOrder:
    return prune_order(policy, NOW, **kw)


def test_old_completed_records_are_pruned_and_recent_ones_kept(backend: Backend) -> None:
    old = [_record(backend, JobStatus.COMPLETED, NOW - 8 * DAY) for _ in range(3)]
    recent = [_record(backend, JobStatus.COMPLETED, NOW - 6 * DAY) for _ in range(2)]
    assert backend.store.prune(_order()) == 3
    assert _kept(backend, JobStatus.COMPLETED) == _ids(recent)
    assert all(backend.store.get(job.id) is None for job in old)


def test_dead_letters_are_kept_longer_than_completed_records(backend: Backend) -> None:
    older_dead = _record(backend, JobStatus.FAILED, NOW - 31 * DAY, tenant_id="acme")
    done = _record(backend, JobStatus.COMPLETED, NOW - 10 * DAY)
    dead = _record(backend, JobStatus.FAILED, NOW - 10 * DAY)
    assert backend.store.prune(_order()) == 2
    assert backend.store.get(done.id) is None
    assert backend.store.get(older_dead.id) is None
    assert _ids(list(backend.store.list_dead())) == {dead.id}
    assert backend.store.count_dead() == {"default": 1}
    assert backend.store.list_dead(tenant_id="acme") == []
    assert backend.store.count_dead(tenant_id="acme") == {}


def test_redis_prunes_by_age_in_recording_order(backend: Backend) -> None:
    """Known difference: Redis walks its index in recording order and stops at the first
    record not yet due, so one recorded earlier but finished later (clock skew between
    workers) holds back those behind it until it is due itself. The others are exact."""
    newer = _record(backend, JobStatus.COMPLETED, NOW - DAY)
    older = _record(backend, JobStatus.COMPLETED, NOW - 9 * DAY)
    gone = backend.store.prune(_order())
    if backend.name == "redis":
        assert gone == 0
        assert prune_all(backend.store, _order(older_than_ms=0)) == 2
    else:
        assert gone == 1
        assert backend.store.get(older.id) is None
        assert backend.store.get(newer.id) is not None


def test_a_count_limit_keeps_the_newest_records(backend: Backend) -> None:
    policy = RetentionPolicy(completed_ms=0, dead_ms=0, max_completed=2, max_dead=1)
    done = [_record(backend, JobStatus.COMPLETED, NOW - DAY) for _ in range(5)]
    dead = [_record(backend, JobStatus.FAILED, NOW - DAY) for _ in range(3)]
    assert backend.store.prune(_order(policy)) == 5
    assert _kept(backend, JobStatus.COMPLETED) == _ids(done[-2:])
    assert _kept(backend, JobStatus.FAILED) == _ids(dead[-1:])


def test_a_revived_dead_letter_is_never_pruned(backend: Backend) -> None:
    dead = _record(backend, JobStatus.FAILED, NOW - 60 * DAY)
    decision = decide_revive(dead, NOW)
    assert decision is not None
    assert Executor(backend.queue, backend.store).carry_out(None, decision)
    everything = _order(older_than_ms=0)
    assert backend.store.count_prunable(everything) == 0
    assert backend.store.prune(everything) == 0
    revived = backend.store.get(dead.id)
    assert revived is not None and revived.status is JobStatus.PENDING


def test_a_finished_record_whose_job_is_queued_again_is_kept(backend: Backend) -> None:
    done = _record(backend, JobStatus.COMPLETED, NOW - 60 * DAY)
    backend.queue.enqueue(make_job(id=done.id))
    assert backend.store.prune(_order(older_than_ms=0)) == 0
    assert backend.store.get(done.id) is not None


def test_one_prune_deletes_at_most_its_batch(backend: Backend) -> None:
    for _ in range(7):
        _record(backend, JobStatus.COMPLETED, NOW - 30 * DAY)
    order = _order(limit=3)
    assert [backend.store.prune(order) for _ in range(4)] == [3, 3, 1, 0]


@pytest.mark.parametrize("name", ["sqlite", "postgresql"])
def test_one_prune_forgets_at_most_ten_batches_of_old_tombstones(name: str) -> None:
    """A day after a large prune its tombstones are due to go: a batch per prune, as
    not all in the one transaction of the next prune (on SQLite, the
    write lock that enqueues wait for)."""
    b = make_backend(name)
    try:
        gone = [_record(b, JobStatus.COMPLETED, NOW - 30 * DAY) for _ in range(25)]
        assert b.store.prune(prune_order(RetentionPolicy(), NOW - 2 * DAY)) == 25
        assert all(b.store.pruned_at(job.id) is not None for job in gone)
        # Those tombstones are now past remember_pruned_ms: 10 batches of 1 go a prune.
        order = _order(limit=1)
        remembered = []
        for _ in range(4):
            b.store.prune(order)
            remembered.append(sum(b.store.pruned_at(job.id) is not None for job in gone))
        assert remembered == [15, 5, 0, 0]
    finally:
        b.cleanup()


def test_prune_all_runs_batches_until_nothing_is_left(backend: Backend) -> None:
    for _ in range(7):
        _record(backend, JobStatus.FAILED, NOW - 40 * DAY)
    assert prune_all(backend.store, _order(limit=2)) == 7
    assert backend.store.list_dead() == []


def test_a_dry_run_counts_what_would_go_and_deletes_nothing(backend: Backend) -> None:
    for _ in range(4):
        _record(backend, JobStatus.COMPLETED, NOW - 9 * DAY)
    _record(backend, JobStatus.COMPLETED, NOW - DAY)
    _record(backend, JobStatus.FAILED, NOW - 9 * DAY)
    assert backend.store.count_prunable(_order(limit=1)) == 4
    assert len(backend.store.list_history(limit=100)) == 6


def test_two_concurrent_pruners_delete_each_record_once(backend: Backend) -> None:
    jobs = [_record(backend, JobStatus.COMPLETED, NOW - 30 * DAY) for _ in range(60)]
    stores = [backend.store, backend.peer()[1] if backend.peer else backend.store]
    totals = [0, 0]
    start = threading.Barrier(2)

    def prune(i: int) -> None:
        start.wait()
        totals[i] = prune_all(stores[i], _order(limit=7))

    threads = [threading.Thread(target=prune, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(totals) == len(jobs)
    assert backend.store.list_history(limit=100) == []


def test_the_worker_prunes_on_its_interval(backend: Backend) -> None:
    clock = ManualClock(NOW)
    policy = RetentionPolicy(interval_ms=60_000)
    pruner = Pruner(backend.store, policy, jitter=lambda: 0.5)
    worker = Worker(
        backend.queue, backend.store, Registry(), clock=clock, pruner=pruner, clock_check=False
    )
    old = _record(backend, JobStatus.COMPLETED, NOW - 8 * DAY)
    worker.run_once()  # first prune: half an interval in (jitter 0.5)
    assert backend.store.get(old.id) is not None
    clock.advance(seconds=30)
    worker.run_once()
    assert backend.store.get(old.id) is None
    later = _record(backend, JobStatus.COMPLETED, NOW - 8 * DAY)
    clock.advance(seconds=59)  # the next comes 54-66 s on (60 s, jitter 0.5 -> 60 s)
    worker.run_once()
    assert backend.store.get(later.id) is not None
    clock.advance(seconds=1)
    worker.run_once()
    assert backend.store.get(later.id) is None


def test_a_pruner_drains_a_backlog_a_batch_every_50_ms() -> None:
    b = make_backend("memory")
    for _ in range(5):
        _record(b, JobStatus.COMPLETED, NOW - 8 * DAY)
    pruner = Pruner(b.store, RetentionPolicy(batch=2), jitter=lambda: 0.0)
    ms = timedelta(milliseconds=1)
    assert pruner.maybe_prune(NOW) == 2
    assert pruner.maybe_prune(NOW + 44 * ms) == 0
    assert pruner.maybe_prune(NOW + 50 * ms) == 2
    assert pruner.maybe_prune(NOW + 100 * ms) == 1
    assert pruner.maybe_prune(NOW + 200 * ms) == 0, "no backlog: a full interval"


def test_an_idle_worker_wakes_for_the_next_batch_of_a_backlog(backend: Backend) -> None:
    clock = ManualClock(NOW)
    policy = RetentionPolicy(batch=2, interval_ms=60_000)
    pruner = Pruner(backend.store, policy, jitter=lambda: 0.0)  # the first prune: now
    worker = Worker(
        backend.queue, backend.store, Registry(), clock=clock, pruner=pruner,
        clock_check=False, poll_interval_ms=1000,
    )  # fmt: skip
    for _ in range(3):
        _record(backend, JobStatus.COMPLETED, NOW - 8 * DAY)
    worker.run_once()  # a full batch: a backlog
    assert worker._idle_timeout_s() == pytest.approx(0.05, abs=0.01), "the next batch, ~50 ms on"
    clock.advance(seconds=0.05)
    worker.run_once()  # the last one: no backlog, the next prune a minute on
    assert _kept(backend, JobStatus.COMPLETED) == set()
    assert worker._idle_timeout_s() == pytest.approx(1.0), "the poll interval"


def test_only_the_worker_that_pruned_last_wakes_for_the_next_batch() -> None:
    """Workers of a process share one pruner: were every idle one woken for its next
    batch, all would run a round every 50 ms of a backlog, and one would prune."""
    b = make_backend("memory")
    for _ in range(5):
        _record(b, JobStatus.COMPLETED, NOW - 8 * DAY)
    pruner = Pruner(b.store, RetentionPolicy(batch=2), jitter=lambda: 0.5)
    assert pruner.maybe_prune(NOW, by="a") == 0  # plans the first, half an interval on
    first = NOW + timedelta(seconds=30)
    assert pruner.next_at("a") == pruner.next_at("b") == first, "before any prune: anyone"
    assert pruner.maybe_prune(first, by="b") == 2
    assert pruner.next_at("b") == first + timedelta(milliseconds=50), "the backlog's next"
    assert pruner.next_at("a") is None, "another worker sleeps on"


def test_the_runtime_prunes_and_purges_through_its_executor() -> None:
    from conveyor.shell.runtime import build

    runtime = build({"provider": "memory", "entry_points": False})
    assert runtime.pruner.executor is runtime.executor  # workers prune through it too
    carried: list[object] = []

    class Recording(Executor):
        def prune(self, order: PruneOrder) -> int:
            carried.append(order)
            return super().prune(order)

        def purge_dead(self, job_id: Any) -> int:
            carried.append(("purge", job_id))
            return super().purge_dead(job_id)

    runtime.executor = Recording(runtime.queue, runtime.store)
    runtime.pruner.executor = runtime.executor
    runtime.store.record(_finished(JobStatus.COMPLETED, T0))
    assert runtime.prune(older_than_ms=0) == 1
    assert runtime.purge_dead() == 0
    assert isinstance(carried[0], PruneOrder) and carried[-1] == ("purge", None)


def test_a_pruner_with_interval_zero_never_prunes() -> None:
    b = make_backend("memory")
    _record(b, JobStatus.COMPLETED, NOW - 8 * DAY)
    pruner = Pruner(b.store, RetentionPolicy(interval_ms=0), jitter=lambda: 0.0)
    assert pruner.maybe_prune(NOW) == 0
    assert len(b.store.list_history()) == 1


def test_a_failing_prune_does_not_stop_the_worker(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def prune(self, order: PruneOrder) -> int:
            raise ConnectionError("database went away")

    pruner = Pruner(Broken(), RetentionPolicy(), jitter=lambda: 0.0)  # type: ignore[arg-type]
    assert pruner.maybe_prune(NOW) == 0
    assert "pruning finished records failed" in caplog.text


def test_retention_config_keys_build_the_policy() -> None:
    config = parse_config(
        {
            "retention": {
                "completed_ms": 3_600_000,
                "dead_ms": 86_400_000,
                "max_completed": 1000,
                "max_dead": 50,
                "prune_interval_ms": 0,
                "batch": 100,
            }
        }
    )
    assert config.retention == RetentionPolicy(3_600_000, 86_400_000, 1000, 50, 100, 0)
    assert parse_config({}).retention == RetentionPolicy()


def test_bad_retention_keys_are_named() -> None:
    with pytest.raises(Exception) as caught:
        parse_config({"retention": {"completed_ms": -1, "batch": 0, "days": 3}})
    text = str(caught.value)
    assert "retention.completed_ms" in text
    assert "retention.batch" in text
    assert "retention.days" in text


def test_durations_for_older_than() -> None:
    assert parse_duration_ms("7d") == 7 * 86_400_000
    assert parse_duration_ms("12h") == 12 * 3_600_000
    assert parse_duration_ms("90") == 90_000
    assert parse_duration_ms("500ms") == 500
    assert parse_duration_ms("soon") is None


# ---- the command line and the runtime -------------------------------------------


def _config_file(tmp_path: Path, name: str) -> tuple[Path, Backend]:
    """A config file for `name` whose store is the returned backend's."""
    b = make_backend(name)
    if name == "sqlite":
        url = str(b.store._db.engine.url)
        text = f'provider = "db"\nurl = "{url}"\n'
    elif name == "postgresql":
        from backends import _postgres_url

        text = f'provider = "db"\nurl = "{_postgres_url()}"\n'
    else:
        from conveyor.testing.redis_server import redis_url

        text = f'provider = "redis"\n[redis]\nurl = "{redis_url(REDIS_TEST_DB)}"\n'
    path = tmp_path / "conveyor.toml"
    path.write_text("entry_points = false\n" + text)
    return path, b


@pytest.mark.parametrize("name", ["sqlite", "postgresql", "redis"])
def test_the_prune_command_deletes_expired_records(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from conveyor.shell.cli.command import main

    path, b = _config_file(tmp_path, name)
    try:
        old = datetime.now(NOW.tzinfo) - 40 * DAY
        for _ in range(3):
            _record(b, JobStatus.COMPLETED, old)
        _record(b, JobStatus.FAILED, old)
        fresh = _record(b, JobStatus.COMPLETED, datetime.now(NOW.tzinfo))
        assert main(["--config", str(path), "prune", "--dry-run"]) == 0
        assert capsys.readouterr().out.strip() == "would prune 4 records"
        assert main(["--config", str(path), "prune"]) == 0
        assert capsys.readouterr().out.strip() == "pruned 4 records"
        assert _ids(list(b.store.list_history())) == {fresh.id}
        assert main(["--config", str(path), "prune", "--older-than", "0s"]) == 0
        assert capsys.readouterr().out.strip() == "pruned 1 records"
    finally:
        b.cleanup()


def test_the_prune_command_refuses_a_bad_duration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from conveyor.shell.cli.command import main

    path, b = _config_file(tmp_path, "sqlite")
    try:
        assert main(["--config", str(path), "prune", "--older-than", "soon"]) == 2
        assert "--older-than" in capsys.readouterr().err
        assert main(["--config", str(path), "prune", "--older-than=-7d"]) == 2
        assert "--older-than: must be a duration of at least 0" in capsys.readouterr().err
    finally:
        b.cleanup()


def test_runtime_prune_on_memory() -> None:
    from conveyor import build

    clock = ManualClock(NOW)
    runtime = build({"provider": "memory", "entry_points": False}, clock=clock)
    runtime.store.record(_finished(JobStatus.COMPLETED, NOW - 8 * DAY))
    runtime.store.record(_finished(JobStatus.COMPLETED, NOW - DAY))
    assert runtime.prune(dry_run=True) == 1
    assert runtime.prune() == 1
    assert runtime.prune(older_than_ms=0) == 1
    assert runtime.store.list_history() == []


def test_the_prune_order_holds_the_policy_cutoffs() -> None:
    policy = RetentionPolicy(completed_ms=DAY // timedelta(milliseconds=1), max_dead=9, dead_ms=0)
    order = prune_order(policy, NOW)
    assert order == PruneOrder(NOW - DAY, None, None, 9, 500, pruned_at=NOW, forget_before=NOW - DAY)
    assert prune_order(RetentionPolicy(0, 0), NOW).is_empty


def test_the_next_prune_is_jittered_around_the_interval() -> None:
    from conveyor.core import next_prune_at

    assert next_prune_at(NOW, 60_000, 0.0, backlog=False) == NOW + timedelta(seconds=54)
    assert next_prune_at(NOW, 60_000, 0.5, backlog=False) == NOW + timedelta(seconds=60)
    assert next_prune_at(NOW, 60_000, 0.5, backlog=True) == NOW + timedelta(milliseconds=50)
