"""Job lookup in every state, on every backend: `JobQueue.find` / `scan`,
`Runtime.get` / `list_jobs`, and `conveyor job show` / `conveyor jobs list`."""

from __future__ import annotations

import json
from datetime import timedelta
from uuid import uuid4

import conveyor
import pytest
from backends import Backend, make_backend
from cli_support import cli, cli_project
from conveyor.core import JobStatus, ValidationError
from conveyor.shell.config import load_config
from conveyor.shell.job_text import SUMMARY_HEADERS, describe, summary_row
from conveyor.shell.ports import Claim, Place
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from conveyor.testing.clock import ManualClock
from helpers import T0, make_job

#: The CLI tests' project (a config and handlers) on SQLite and Redis, and its commands
#: called in-process.
__all__ = ["cli", "cli_project"]

LEASE = timedelta(seconds=30)


def boom(args):
    raise conveyor.Permanent("card declined")


def flaky(args):
    raise ConnectionError("try later")


def add(args):
    return {"total": args["a"] + args["b"]}


@pytest.fixture
def rt(backend: Backend) -> Runtime:
    """A runtime over the backend's queue and store, on a manual clock at T0."""
    registry = Registry()
    for name, handler in {"boom": boom, "flaky": flaky, "add": add}.items():
        registry.register(name, handler)
    config = load_config(
        {"provider": "memory", "lease_ms": int(LEASE / timedelta(milliseconds=1))}, env={}
    )
    return Runtime(
        config, backend.queue, backend.store, registry, clock=ManualClock(T0), jitter=lambda: 0.5
    )


# ---- the queue port: find and scan --------------------------------------------------


def test_find_is_none_for_a_job_the_queue_does_not_hold(backend: Backend) -> None:
    assert backend.queue.find(uuid4()) is None


def test_a_ready_job_is_found_ready(backend: Backend) -> None:
    job = make_job(queue="mail")
    backend.queue.enqueue(job)
    found = backend.queue.find(job.id)
    assert found is not None
    assert (found.place, found.queue, found.job, found.token) == (Place.READY, "mail", job, None)


def test_a_parked_job_is_found_scheduled(backend: Backend) -> None:
    job = make_job(run_at=T0 + timedelta(hours=1))
    backend.queue.enqueue(job)
    found = backend.queue.find(job.id)
    assert found is not None and found.place is Place.SCHEDULED and found.job == job


def test_a_claimed_job_is_found_in_flight_with_its_token_and_claim_time(backend: Backend) -> None:
    job = make_job()
    backend.queue.enqueue(job)
    claim = backend.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    found = backend.queue.find(job.id)
    assert found is not None and found.place is Place.IN_FLIGHT
    assert (found.token, found.locked_at) == (claim.token, T0)


def test_an_acked_job_is_no_longer_found(backend: Backend) -> None:
    backend.queue.enqueue(job := make_job())
    claim = backend.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and backend.queue.ack(claim)
    assert backend.queue.find(job.id) is None


def test_scan_reads_in_flight_then_ready_in_claim_order_then_scheduled(backend: Backend) -> None:
    later = make_job(run_at=T0 + timedelta(hours=2))
    sooner = make_job(run_at=T0 + timedelta(hours=1))
    low, high, taken = make_job(priority="low"), make_job(priority="high"), make_job()
    for job in (taken, later, low, sooner, high):
        backend.queue.enqueue(job)
    # `taken` goes first of the ready ones only once `high` is out of the way: claim it.
    claim = backend.queue.dequeue("default", T0)
    assert isinstance(claim, Claim) and claim.job.id == high.id
    scanned = [(e.place, e.job.id) for e in backend.queue.scan()]
    assert scanned == [
        (Place.IN_FLIGHT, high.id),
        (Place.READY, taken.id),
        (Place.READY, low.id),
        (Place.SCHEDULED, sooner.id),
        (Place.SCHEDULED, later.id),
    ]


def test_scan_filters_by_queue_and_place(backend: Backend) -> None:
    mail, other = make_job(queue="mail"), make_job(queue="other")
    parked = make_job(queue="mail", run_at=T0 + timedelta(hours=1))
    for job in (mail, other, parked):
        backend.queue.enqueue(job)
    assert [e.job.id for e in backend.queue.scan("mail")] == [mail.id, parked.id]
    assert [e.job.id for e in backend.queue.scan(place=Place.SCHEDULED)] == [parked.id]
    assert list(backend.queue.scan("mail", Place.IN_FLIGHT)) == []


def test_scan_pages_through_more_jobs_than_one_batch(backend: Backend) -> None:
    jobs = [make_job(args={"i": i}) for i in range(7)]
    parked = [make_job(run_at=T0 + timedelta(minutes=i + 1)) for i in range(5)]
    backend.queue.enqueue_many([*jobs, *parked])
    assert [e.job.id for e in backend.queue.scan(batch=2)] == [j.id for j in [*jobs, *parked]]


@pytest.mark.parametrize("name", ["sqlite", "postgresql", "redis"])
def test_an_undecodable_payload_is_found_with_its_problem_never_its_text(name: str) -> None:
    b = make_backend(name)
    try:
        job = make_job()
        b.queue.enqueue(job)
        assert b.corrupt is not None
        b.corrupt(job, '{"secret": "s3cr3t"')
        found = b.queue.find(job.id)
        assert found is not None and found.job is None and found.place is Place.READY
        assert found.problem and "s3cr3t" not in found.problem
        assert [e.job_id for e in b.queue.scan()] == [str(job.id)]
    finally:
        b.cleanup()


def test_a_sqlite_lookup_reads_beside_an_open_writer(tmp_path) -> None:
    import sqlite3

    from conveyor.shell.adapters.sql import SqlJobQueue, make_engine
    from conveyor.shell.adapters.sql.migration import create_tables

    path = tmp_path / "jobs.db"
    engine = make_engine(f"sqlite:///{path}")
    create_tables(engine)
    queue = SqlJobQueue(engine, lock_retry_s=0)
    queue.enqueue(job := make_job())
    writer = sqlite3.connect(path, timeout=0)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE held_by_a_writer (x)")
    try:
        found = queue.find(job.id)
        listed = [e.job for e in queue.scan()]
    finally:
        writer.rollback()
        writer.close()
        engine.dispose()
    assert found is not None and found.job == job and listed == [job]


# ---- Runtime.get: every state --------------------------------------------------------


def test_a_job_nobody_holds_is_none(rt: Runtime) -> None:
    assert rt.get(uuid4()) is None


def test_a_malformed_id_is_a_validation_error_naming_job_id(rt: Runtime) -> None:
    with pytest.raises(ValidationError) as info:
        rt.get("not-a-uuid")
    assert info.value.fields == ("job_id",)


def test_a_delayed_job_is_scheduled_with_its_next_run(rt: Runtime) -> None:
    job = rt.enqueue("add", {"a": 1, "b": 2}, delay=60)
    view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.SCHEDULED
    assert view.next_run_at == T0 + timedelta(seconds=60) and view.token is None


def test_an_enqueued_job_is_pending(rt: Runtime) -> None:
    job = rt.enqueue("add", {"a": 1, "b": 2}, queue="default")
    view = rt.get(str(job.id))
    assert view is not None and view.state is JobStatus.PENDING and view.job == job
    assert view.next_run_at is None


def test_a_claimed_job_is_running_with_its_token_and_lease_expiry(rt: Runtime) -> None:
    job = rt.enqueue("add", {"a": 1, "b": 2})
    claim = rt.queue.dequeue("default", T0)
    assert isinstance(claim, Claim)
    view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.RUNNING
    assert (view.token, view.claimed_at, view.lease_expires_at) == (claim.token, T0, T0 + LEASE)
    assert not view.prefetched


def test_a_running_job_shows_the_number_of_the_attempt_it_is_in(rt: Runtime) -> None:
    """The stored record of a running job may be the one written before its start (a
    store writes the start with the finish): the view counts the running attempt."""
    job = rt.enqueue("flaky", {})
    rt.drain()  # the first attempt fails: retrying, one attempt made
    view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.RETRYING and view.attempt == 1
    due = view.next_run_at
    assert due is not None
    rt.clock.set(due)
    claim = rt.queue.dequeue("default", due)
    assert isinstance(claim, Claim) and claim.job.id == job.id
    view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.RUNNING
    assert view.attempt == 2 and view.to_dict()["attempt"] == 2
    assert "attempt: 2 (retries 1 of 3)" in describe(view)
    assert summary_row(view)[SUMMARY_HEADERS.index("attempt")] == 2
    first = rt.enqueue("add", {"a": 1, "b": 2})
    assert rt.queue.dequeue("default", due) is not None
    running = rt.get(first.id)
    assert running is not None and running.state is JobStatus.RUNNING and running.attempt == 1
    waiting = rt.enqueue("add", {"a": 2, "b": 3})
    [prefetched] = rt.queue.dequeue_many("default", due, 1)
    assert isinstance(prefetched, Claim) and prefetched.job.id == waiting.id
    view = rt.get(waiting.id)
    assert view is not None and view.prefetched, "claimed in a batch, not started"
    assert view.attempt == 0, "no attempt has started"


def test_a_failed_attempt_with_retries_left_is_retrying_until_its_next_run(rt: Runtime) -> None:
    job = rt.enqueue("flaky", {})
    rt.drain()
    view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.RETRYING
    assert view.next_run_at is not None and view.next_run_at > T0
    assert view.job is not None and view.job.last_error is not None
    assert view.job.last_error.type == "ConnectionError" and view.job.attempt == 1


def test_a_completed_job_shows_its_result(rt: Runtime) -> None:
    job = rt.enqueue("add", {"a": 2, "b": 3})
    rt.drain()
    view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.COMPLETED
    assert view.job is not None and view.job.result == {"total": 5}


def test_a_dead_letter_is_failed_with_its_error(rt: Runtime) -> None:
    job = rt.enqueue("boom", {})
    rt.drain()
    view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.FAILED and view.dead
    assert view.job is not None and view.job.last_error is not None
    assert view.job.last_error.message == "card declined"


def test_a_revived_dead_letter_is_pending_again(rt: Runtime) -> None:
    job = rt.enqueue("boom", {})
    rt.drain()
    rt.retry_dead(job.id)
    view = rt.get(job.id)
    assert view is not None and view.state is JobStatus.PENDING and not view.dead


def test_the_view_hides_args_and_result_unless_asked(rt: Runtime) -> None:
    job = rt.enqueue("add", {"a": 2, "b": 3})
    rt.drain()
    view = rt.get(job.id)
    assert view is not None
    hidden = view.to_dict()
    assert "args" not in hidden and "result" not in hidden
    shown = view.to_dict(show_args=True, show_result=True)
    assert (shown["args"], shown["result"]) == ({"a": 2, "b": 3}, {"total": 5})


# ---- Runtime.list_jobs -----------------------------------------------------------------


def test_listing_filters_by_state_queue_and_type(rt: Runtime) -> None:
    done = rt.enqueue("add", {"a": 1, "b": 1})
    dead = rt.enqueue("boom", {})
    rt.drain()
    waiting = rt.enqueue("add", {"a": 1, "b": 1})
    other = rt.enqueue("boom", {}, queue="other")
    parked = rt.enqueue("add", {"a": 1, "b": 1}, delay=60)
    ids = lambda **filters: [v.job_id for v in rt.list_jobs(**filters)]  # noqa: E731
    assert ids(state="completed") == [str(done.id)]
    assert ids(state="dead") == ids(state=JobStatus.FAILED) == [str(dead.id)]
    assert ids(state="pending") == [str(waiting.id), str(other.id)]
    assert ids(state="scheduled") == [str(parked.id)]
    assert ids(queue="other") == [str(other.id)]
    assert ids(job_type="boom") == [str(other.id), str(dead.id)]
    assert set(ids()) == {str(j.id) for j in (done, dead, waiting, other, parked)}


def test_listing_puts_queued_work_first_and_stops_at_the_limit(rt: Runtime) -> None:
    rt.enqueue("add", {"a": 1, "b": 1})
    rt.drain()
    queued = [rt.enqueue("add", {"a": i, "b": 1}) for i in range(3)]
    assert [v.job_id for v in rt.list_jobs(limit=2)] == [str(j.id) for j in queued[:2]]
    assert rt.list_jobs(limit=0) == []


def test_an_unknown_state_is_a_validation_error_naming_state(rt: Runtime) -> None:
    with pytest.raises(ValidationError) as info:
        rt.list_jobs(state="stuck")
    assert info.value.fields == ("state",)


# ---- the CLI, on SQLite and Redis ------------------------------------------------------


def _show(cli, job_id: str, *flags: str) -> dict:
    return json.loads(cli("job", "show", job_id, "--json", *flags).stdout)


def test_job_show_follows_a_job_from_scheduled_to_dead(cli_project, cli) -> None:
    parked = cli("enqueue", "ship", "{}", "--delay", "3600").stdout.strip()
    assert _show(cli, parked)["state"] == "scheduled"
    assert _show(cli, parked)["next_run_at"] is not None
    job_id = cli("enqueue", "explode", json.dumps({"card": "s3cr3t"})).stdout.strip()
    assert _show(cli, job_id)["state"] == "pending"
    rt = conveyor.build(str(cli_project / "conveyor.toml"))
    try:
        claim = rt.queue.dequeue("default", rt.clock.now())
        assert isinstance(claim, Claim) and str(claim.job.id) == job_id
        running = _show(cli, job_id)
        assert running["state"] == "running" and running["claim"]["token"] == claim.token
        assert running["claim"]["lease_expires_at"] is not None
        rt.queue.ack(claim)
        rt.queue.enqueue(claim.job)
        rt.drain()
    finally:
        rt.close()
    dead = _show(cli, job_id)
    assert dead["state"] == "failed" and dead["dead"] is True
    assert dead["last_error"]["message"] == "cannot ship to the moon"
    assert "s3cr3t" not in json.dumps(dead), "args stay hidden unless asked"
    assert "s3cr3t" in json.dumps(_show(cli, job_id, "--show-args"))
    text = cli("job", "show", job_id).stdout
    assert "state: failed (dead letter)" in text and "cannot ship to the moon" in text


def test_job_show_of_an_unknown_job_exits_1(cli) -> None:
    result = cli("job", "show", str(uuid4()), check=False)
    assert result.returncode == 1 and "no job" in result.stderr


def test_jobs_list_filters_by_queue_state_and_type(cli) -> None:
    mail = cli("enqueue", "ship", "{}", "--queue", "mail").stdout.strip()
    parked = cli("enqueue", "explode", "{}", "--delay", "3600").stdout.strip()
    listed = json.loads(cli("jobs", "list", "--json").stdout)
    assert {j["id"]: j["state"] for j in listed} == {mail: "pending", parked: "scheduled"}
    by_queue = json.loads(cli("jobs", "list", "--queue", "mail", "--json").stdout)
    assert [j["id"] for j in by_queue] == [mail]
    by_state = json.loads(cli("jobs", "list", "--state", "scheduled", "--json").stdout)
    assert [j["id"] for j in by_state] == [parked]
    by_type = json.loads(cli("jobs", "list", "--type", "ship", "--json").stdout)
    assert [j["id"] for j in by_type] == [mail]
    table = cli("jobs", "list", "--limit", "1").stdout
    assert mail in table and parked not in table


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (("job", "show", "not-a-uuid"), "job_id"),
        (("jobs", "list", "--state", "stuck"), "--state"),
        (("jobs", "list", "--limit=-1"), "--limit"),
        (("jobs", "list", "--queue", "../x"), "--queue"),
        (("jobs", "list", "--type", "a b"), "--type"),
    ],
)
def test_bad_lookup_input_exits_2_naming_the_field(cli, argv, field) -> None:
    result = cli(*argv, check=False)
    assert result.returncode == 2, result.stderr
    assert field in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_operations_page_example_runs(capsys) -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    example = re.findall(r"```python\n(.*?)```", page, re.S)[-1]
    exec(compile(example, "operations.md", "exec"), {})
    assert capsys.readouterr().out.splitlines()[0] == "scheduled"
