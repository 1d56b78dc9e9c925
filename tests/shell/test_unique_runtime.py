"""Caller-chosen ids and unique keys through the public API and the CLI."""

from __future__ import annotations

import uuid
from datetime import timedelta

import conveyor
import pytest
from backends import make_backend
from conveyor.core import JobStatus, ValidationError
from conveyor.shell.cli.command import main
from helpers import make_job


def _memory(**handlers):
    return conveyor.build({"provider": "memory", "entry_points": False}, handlers=handlers)


def _announced(rt) -> list:
    seen: list = []
    rt.hooks.on_enqueued(seen.append)
    return seen


def test_enqueue_with_a_taken_id_returns_the_first_job_with_its_args() -> None:
    rt = _memory()
    job_id = uuid.uuid4()
    first = rt.enqueue("invoice", {"order": 1}, id=job_id)
    again = rt.enqueue("invoice", {"order": 2}, id=str(job_id), priority="high")
    assert again == first
    assert dict(rt.get(job_id).job.args) == {"order": 1}


def test_a_job_already_there_is_not_announced_to_the_enqueued_hook() -> None:
    rt = _memory()
    seen = _announced(rt)
    job_id = uuid.uuid4()
    rt.enqueue("invoice", {}, id=job_id)
    rt.enqueue("invoice", {}, id=job_id)
    rt.enqueue("invoice", {}, unique_key="k")
    rt.enqueue("invoice", {}, unique_key="k")
    assert len(seen) == 2


def test_a_malformed_id_is_a_one_line_validation_error() -> None:
    with pytest.raises(ValidationError) as info:
        _memory().enqueue("invoice", {}, id="order-42")
    assert str(info.value) == "id: 'order-42' is not a job id (a UUID)"


def test_enqueue_with_a_held_unique_key_returns_the_holder() -> None:
    rt = _memory()
    holder = rt.enqueue("digest", {"n": 1}, unique_key="digest:alice")
    assert rt.enqueue("digest", {"n": 2}, unique_key="digest:alice") == holder
    assert rt.enqueue("digest", {"n": 3}, unique_key="digest:bob") != holder
    assert rt.status().queues[0].ready == 2


def test_a_unique_key_is_free_again_once_its_job_has_run() -> None:
    ran: list = []
    rt = _memory(digest=ran.append)
    first = rt.enqueue("digest", {"n": 1}, unique_key="digest:alice")
    rt.drain()
    second = rt.enqueue("digest", {"n": 2}, unique_key="digest:alice")
    assert second.id != first.id and second.status is JobStatus.PENDING


def test_a_unique_key_counting_completed_stays_held_after_the_run() -> None:
    rt = _memory(digest=lambda args: None)
    first = rt.enqueue(
        "digest",
        {},
        unique_key="digest:once-an-hour",
        unique_for=timedelta(hours=1),
        unique_states=["pending", "running", "completed"],
    )
    rt.drain()
    again = rt.enqueue("digest", {}, unique_key="digest:once-an-hour")
    assert again.id == first.id and again.status is JobStatus.COMPLETED


def test_enqueue_many_with_a_unique_key_writes_one_job() -> None:
    rt = _memory()
    seen = _announced(rt)
    jobs = rt.enqueue_many("digest", [{"n": 1}, {"n": 2}, {"n": 3}], unique_key="batch")
    assert len(jobs) == 3 and jobs[1] == jobs[0] and jobs[2] == jobs[0]
    assert dict(jobs[0].args) == {"n": 1}
    assert len(seen) == 1


def test_enqueue_in_tx_with_a_taken_id_returns_it_and_commits_the_callers_writes(
    tmp_path,
) -> None:
    rt = conveyor.build({"url": f"sqlite:///{tmp_path / 'jobs.db'}", "entry_points": False})
    taken = rt.enqueue("invoice", {"order": 1})
    with rt.queue.engine.begin() as conn:
        other = rt.enqueue_in_tx(conn, "invoice", {"order": 2})
        found = rt.enqueue_in_tx(conn, "invoice", {"order": 3}, id=taken.id)
    assert found == taken
    assert rt.get(other.id) is not None, "the caller's transaction still committed"
    rt.close()


@pytest.mark.parametrize("name", ["sqlite", "postgresql"])
def test_enqueue_new_in_tx_rolls_back_only_its_own_savepoint(name: str) -> None:
    b = make_backend(name)
    try:
        done = make_job()
        b.queue.enqueue(done)
        mine = make_job()
        key = f"k:{uuid.uuid4().hex}"
        clash = make_job(id=done.id, unique_key=key)
        with b.queue.engine.begin() as conn:
            b.queue.enqueue_in_tx(conn, mine)
            assert b.queue.enqueue_new_in_tx(conn, clash) == done
        assert b.queue.find(mine.id) is not None
        assert b.queue.enqueue_new(make_job(unique_key=key)) is None, "the key was never taken"
        with pytest.raises(ValidationError):
            b.queue.enqueue_new_in_tx(b.queue.engine, make_job())
    finally:
        b.cleanup()


def test_the_cli_prints_the_id_of_the_job_already_there(tmp_path, capsys) -> None:
    config = tmp_path / "conveyor.toml"
    config.write_text(f'url = "sqlite:///{tmp_path / "jobs.db"}"\nentry_points = false\n')
    argv = ["--config", str(config), "enqueue", "digest", "{}", "--unique-key", "digest:alice"]
    assert main(argv) == 0
    first = capsys.readouterr().out.strip()
    assert main([*argv, "--unique-for", "60", "--unique-state", "pending"]) == 0
    assert capsys.readouterr().out.strip() == first
    job_id = str(uuid.uuid4())
    assert main(["--config", str(config), "enqueue", "digest", "{}", "--id", job_id]) == 0
    assert capsys.readouterr().out.strip() == job_id


def test_the_cli_takes_spans_of_time_with_their_unit_as_prune_does(tmp_path, capsys) -> None:
    # `--unique-for 1h` was refused as "invalid float value", while `prune --older-than`
    # took 12h: every span of the command line takes both forms now.
    config = tmp_path / "conveyor.toml"
    config.write_text(f'url = "sqlite:///{tmp_path / "jobs.db"}"\nentry_points = false\n')
    argv = ["--config", str(config), "enqueue", "digest", "{}", "--unique-key", "digest:bob"]
    assert main([*argv, "--unique-for", "1h", "--delay", "2m", "--timeout", "90s"]) == 0
    job_id = capsys.readouterr().out.strip()
    rt = conveyor.build(str(config))
    try:
        job = rt.get(job_id).job
    finally:
        rt.close()
    assert job.unique.expires_at - job.created_at == timedelta(hours=1)
    assert job.run_at - job.created_at == timedelta(minutes=2)
    assert job.timeout_ms == 90_000
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--unique-for", "1x"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "--unique-for: must be seconds (90, 1.5) or a duration such as 90s" in err


def test_the_cli_refuses_a_malformed_id_in_one_line(tmp_path, capsys) -> None:
    config = tmp_path / "conveyor.toml"
    config.write_text(f'url = "sqlite:///{tmp_path / "jobs.db"}"\nentry_points = false\n')
    assert main(["--config", str(config), "enqueue", "digest", "{}", "--id", "nope"]) == 2
    assert capsys.readouterr().err.strip().endswith("id: 'nope' is not a job id (a UUID)")
