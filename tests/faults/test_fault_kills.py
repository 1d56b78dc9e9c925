"""Worker processes killed mid-run: kill -9, a poison pill, and SIGTERM with a short grace."""

from __future__ import annotations

import signal
import sys
import time
from collections import Counter

import pytest
from conveyor.core import JobStatus
from fault_harness import HERE, LEASE_MS, Site, WorkerProc, cli_config, wait_until

pytestmark = pytest.mark.timeout(90)


def test_kill_9_of_busy_workers_several_times_loses_no_job(site: Site) -> None:
    # Enough work that the last kill still finds some queued: at most six handlers run
    # at once (two workers of three threads), about 200 jobs/s, so 1,000 outlast the kills.
    jobs, kills = 1000, 4
    site.produce(jobs, sleep_ms=30)
    # One claims a job at a time, the other four per round trip (prefetch, batched finish).
    fleet = [site.spawn(threads=3), site.spawn(threads=3, prefetch=4)]
    for i in range(kills):
        time.sleep(0.6)
        assert site.counts().ready > 0, "each kill lands while there is work left"
        fleet.pop(0).kill()  # the longest-running worker: busy by now
        fleet.append(site.spawn(threads=3, prefetch=1 if i % 2 else 4, ready=False))
    site.drain(timeout_s=40, threads=2)

    f = site.figures()
    f.assert_no_loss()
    assert f.completed == jobs
    assert f.unreleased_on_dead >= kills, "every kill caught a worker holding claims"
    claimed_by_dead = {w.job_id for w in site.ledger.writes() if w.pid in site.dead}
    assert f.duplicated_ids <= claimed_by_dead, "only jobs a killed worker held ran twice"
    finishes = Counter(w.job_id for w in site.ledger.writes() if w.op == "finish" and w.ok)
    assert max(finishes.values()) == 1, "no job had two outcomes accepted"


def test_a_poison_pill_is_dead_lettered_after_its_budget_and_the_rest_completes(
    site: Site,
) -> None:
    normal = site.produce(30, sleep_ms=5)
    poison = site.job(poison=True, max_retries=1)  # its reclaim budget: 1
    assert site.enqueue(poison)
    deadline = time.monotonic() + 45
    worker = site.spawn(threads=1)
    while time.monotonic() < deadline:
        if not worker.alive:
            assert worker.wait() == 9, "only the poison pill kills a worker"
            worker = site.spawn(threads=1)
        c = site.counts()
        if c.ready + c.scheduled + c.in_flight == 0:
            break
        time.sleep(0.05)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0

    dead = site.store.get(poison.id)
    assert dead is not None and dead.status is JobStatus.FAILED
    assert dead.last_error is not None and dead.last_error.type == "lease-expired"
    assert "budget 1" in dead.last_error.message
    assert len(site.ledger.executions(str(poison.id))) == 2, "ran once, reclaimed once, then out"
    assert [j.id for j in site.store.list_dead()] == [poison.id]

    f = site.figures(settled={str(poison.id)})
    f.assert_no_loss()
    assert f.completed == len(normal)
    assert all(site.store.get(j.id).status is JobStatus.COMPLETED for j in normal)


GRACE_S = 1.0
SLACK_S = 1.5


def test_sigterm_lets_short_jobs_finish_leaves_a_long_one_to_its_lease_and_exits_in_time(
    site: Site,
) -> None:
    long_job = site.job(sleep_ms=20_000, slow_first=True)
    assert site.enqueue(long_job)
    short = site.produce(12, sleep_ms=150)
    config = site.folder / "conveyor.toml"
    config.write_text(cli_config(site))
    worker = WorkerProc(
        site,
        ["--config", str(config), "--log-level", "INFO", "worker", "--grace", str(GRACE_S)],
        script=[sys.executable, "-m", "conveyor.shell.cli"],
        env={"PYTHONPATH": str(HERE), "CONVEYOR_FAULT_LEDGER": str(site.ledger.path)},
    )
    # Both threads busy: one on the long job, one on a short one.
    site.ledger.wait_for("SELECT count(*) >= 3 FROM executions")
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(timeout_s=GRACE_S + 10)
    took = time.monotonic() - sent
    assert took <= GRACE_S + SLACK_S, f"exited {took:.2f}s after SIGTERM (grace {GRACE_S}s)"
    assert code == 3, "not clean: the long job was still running when the grace ran out"

    # Every short job it started finished and was released; the long one is in flight.
    started = {r.job_id for r in site.ledger.executions()}
    finished = {r.job_id for r in site.ledger.executions() if r.ended is not None}
    assert started - finished == {str(long_job.id)}
    assert site.counts().in_flight == 1
    done = [j for j in short if (r := site.store.get(j.id)) and r.status is JobStatus.COMPLETED]
    assert {str(j.id) for j in done} == finished & {str(j.id) for j in short}

    site.dead.add(worker.pid)
    site.drain(timeout_s=LEASE_MS / 1000 + 20)
    f = site.figures()
    # The CLI worker has no ledger proxy, so its one unreleased claim is counted here.
    f.assert_no_loss(duplicates_at_most=1)
    assert f.completed == len(short) + 1
    assert f.duplicated_ids == {str(long_job.id)}, "only the job cut off by the grace reran"


def test_healthy_prefetching_workers_run_no_job_twice(site: Site) -> None:
    """No crash, no outage: batches mixing short jobs with ones longer than the lease run
    every job exactly once (every claim a worker holds is kept leased)."""
    short = site.produce(150, sleep_ms=5)
    long = site.produce(4, sleep_ms=int(LEASE_MS * 1.5))
    more = site.produce(150, sleep_ms=5)
    fleet = [site.spawn(threads=2, prefetch=10), site.spawn(threads=2, prefetch=10)]
    wait_until(
        lambda: (lambda c: c.ready + c.scheduled + c.in_flight == 0)(site.counts()),
        timeout_s=60,
        what="the queue to empty",
    )
    for worker in fleet:
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    f = site.figures()
    f.assert_no_loss(duplicates_at_most=0)
    assert f.completed == len(short) + len(long) + len(more)
    assert f.lease_lost == 0, "a healthy worker lost a lease"
