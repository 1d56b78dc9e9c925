"""A worker process dies (`os._exit(9)`) at each point between two effects of a job.

Each test crashes one `fault_worker.py` process once, at one failpoint, checks
that the job it held is still somewhere (in flight, queued or recorded), then lets
a clean worker drain the queue and reads the ledger: nothing lost, nothing stuck,
no two live holders, and at most the crashed worker's claim run twice.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from conveyor.core import JobStatus
from fault_harness import Site, wait_until

pytestmark = pytest.mark.timeout(60)

JOBS = 20


def statuses(site: Site, jobs: list[Any]) -> Counter[str]:
    return Counter(
        (record.status.value if (record := site.store.get(job.id)) else "unrecorded")
        for job in jobs
    )


def claims_of(site: Site, pid: int) -> list[str]:
    """Job ids the process `pid` claimed."""
    return [w.job_id for w in site.ledger.writes() if w.op == "claim" and w.pid == pid]


def test_a_worker_dying_right_after_its_claim_loses_nothing(site: Site) -> None:
    jobs = site.produce(JOBS)
    crashed = site.spawn(threads=1, failpoint="after-claim", marker=site.marker("claim"))
    assert crashed.wait() == 9
    [held] = claims_of(site, crashed.pid)
    assert site.counts().in_flight == 1, "the claimed job must stay in flight"
    assert site.ledger.executions(held) == [], "the job never reached its handler"

    site.drain()

    f = site.figures()
    f.assert_no_loss()
    assert (f.completed, f.duplicates, f.unreleased_on_dead) == (JOBS, 0, 1)
    assert statuses(site, jobs) == {"completed": JOBS}


def test_a_worker_dying_after_the_handler_before_the_outcome_write_runs_it_again(
    site: Site,
) -> None:
    jobs = site.produce(JOBS)
    crashed = site.spawn(threads=1, failpoint="before-outcome", marker=site.marker("outcome"))
    assert crashed.wait() == 9
    [held] = claims_of(site, crashed.pid)
    assert site.counts().in_flight == 1
    assert site.store.get(_uuid(held)) is None, "no outcome was written"
    assert held in site.ledger.effects(), "the handler's effect was committed before the crash"

    site.drain()

    f = site.figures()
    f.assert_no_loss()
    # The one job whose outcome was never written ran twice: at-least-once, bounded.
    assert (f.completed, f.duplicates, f.unreleased_on_dead) == (JOBS, 1, 1)
    assert f.duplicated_ids == {held}
    assert statuses(site, jobs) == {"completed": JOBS}


def test_a_worker_dying_right_after_its_atomic_finish_leaves_nothing_to_redo(
    site: Site,
) -> None:
    # On SQL and Redis the record and the release are one step: there is no window
    # between them for a crash to fall into.
    jobs = site.produce(JOBS)
    crashed = site.spawn(threads=1, failpoint="after-finish", marker=site.marker("finish"))
    assert crashed.wait() == 9
    [held] = claims_of(site, crashed.pid)
    record = site.store.get(_uuid(held))
    assert record is not None and record.status is JobStatus.COMPLETED
    assert site.counts().in_flight == 0, "recorded and released together"

    site.drain()

    f = site.figures()
    f.assert_no_loss()
    assert (f.completed, f.duplicates, f.unreleased_on_dead) == (JOBS, 0, 0)
    assert statuses(site, jobs) == {"completed": JOBS}


def test_a_worker_dying_between_a_retry_write_and_its_ack_loses_nothing(site: Site) -> None:
    flaky = site.job(fail_first=True)
    assert site.enqueue(flaky)
    jobs = [flaky, *site.produce(JOBS - 1)]
    crashed = site.spawn(threads=1, failpoint="before-ack", marker=site.marker("ack"))
    assert crashed.wait() == 9
    assert claims_of(site, crashed.pid) == [str(flaky.id)]
    c = site.counts()
    assert (c.in_flight, c.scheduled) == (0, 1), f"the retry is parked, not held: {c}"

    site.drain()

    f = site.figures()
    f.assert_no_loss(duplicates_at_most=1)  # the retry: a second execution by design
    runs = site.ledger.executions(str(flaky.id))
    assert [r.failed for r in runs] == [1, 0], "failed once, retried once, nothing more"
    assert (f.completed, f.duplicates) == (JOBS, 1)
    assert statuses(site, jobs) == {"completed": JOBS}


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_worker_dying_around_an_undecodable_payloads_dead_letter_keeps_one(
    site: Site, when: str
) -> None:
    jobs = site.produce(JOBS // 2)
    bad = site.plant('{"not": "a job"}')
    jobs += site.produce(JOBS // 2)
    point = f"{when}-bad-finish"
    crashed = site.spawn(threads=1, failpoint=point, marker=site.marker(point))
    assert crashed.wait() == 9
    recorded = site.store.get(bad)
    if when == "before":
        # The record and the release are one step: neither happened, the lease keeper
        # dead-letters it once the lease runs out.
        assert recorded is None and site.counts().in_flight == 1
    else:
        assert recorded.last_error.type == "decode-error"
        assert site.counts().in_flight == 0, "recorded and released together"

    site.drain()

    assert [j.id for j in site.store.list_dead()] == [bad], "one dead letter, however often"
    f = site.figures(settled={str(bad)})
    f.assert_no_loss()
    assert (f.completed, f.duplicates) == (JOBS, 0)
    assert statuses(site, jobs) == {"completed": JOBS}


def test_a_lease_keeper_dying_between_its_read_and_its_write_loses_nothing(site: Site) -> None:
    jobs = site.produce(JOBS)
    holder = site.spawn(threads=1, failpoint="after-claim", marker=site.marker("claim"))
    assert holder.wait() == 9
    [held] = claims_of(site, holder.pid)
    # The next worker runs the rest, then finds the dead holder's claim abandoned and dies
    # after reading it, before returning it to ready.
    keeper = site.spawn(threads=1, failpoint="before-reclaim", marker=site.marker("reclaim"))
    assert keeper.wait(timeout_s=30) == 9
    assert site.counts().in_flight == 1, "the abandoned claim is still in flight"
    assert not [w for w in site.ledger.writes() if w.op == "reclaim"], "no reclaim was written"
    assert site.ledger.executions(held) == []

    site.drain()

    f = site.figures()
    f.assert_no_loss()
    assert (f.completed, f.duplicates) == (JOBS, 0)
    assert statuses(site, jobs) == {"completed": JOBS}


PROMOTED = 1000


def test_kill_9_in_the_middle_of_promoting_a_thousand_due_jobs_loses_none(site: Site) -> None:
    jobs = site.scheduled_jobs(PROMOTED)
    for job in jobs:
        assert site.enqueue(job)
    assert site.counts().scheduled == PROMOTED
    promoter = site.spawn("--mode", "promote-loop", "--promote-batch", "5")
    # Let it get going, then SIGKILL it wherever it is in its loop of promote_due calls.
    promoter.expect("promoted 100")
    promoter.kill()
    c = site.counts()
    assert (c.ready + c.scheduled, c.in_flight) == (PROMOTED, 0), f"every job in one place: {c}"
    assert 0 < c.ready < PROMOTED, f"the kill landed mid-promotion: {c}"

    site.drain(timeout_s=45, threads=2)

    f = site.figures()
    f.assert_no_loss()
    assert (f.completed, f.duplicates) == (PROMOTED, 0)
    wait_until(lambda: site.counts().scheduled == 0, what="nothing left scheduled")


def _uuid(value: str) -> Any:
    from uuid import UUID

    return UUID(value)
