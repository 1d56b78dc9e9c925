"""The job record: deeply frozen, hashable, and quiet about its args."""

from __future__ import annotations

import attrs
import pytest
from conveyor.core import (
    PRIORITY_ORDER,
    FrozenMap,
    JobStatus,
    Priority,
    Succeeded,
    decide,
    freeze,
    start,
    thaw,
)
from conveyor.core.policies import Policies
from core_support import NOW, make_job

CANARY = "s3cr3t-canary"

NESTED = {"user": {"name": "ada", "roles": ["admin", "ops"]}, "ids": [1, 2, [3, 4]]}


def test_args_objects_are_frozen_maps_all_the_way_down() -> None:
    job = make_job(args=NESTED)
    assert isinstance(job.args, FrozenMap)
    assert isinstance(job.args["user"], FrozenMap)
    assert job.args["user"]["roles"] == ("admin", "ops")
    assert job.args["ids"] == (1, 2, (3, 4))


def test_frozen_args_thaw_back_to_the_plain_json_given() -> None:
    assert thaw(make_job(args=NESTED).args) == NESTED


def test_args_cannot_be_changed_in_place() -> None:
    job = make_job(args=NESTED)
    with pytest.raises(TypeError):
        job.args["user"] = "mallory"  # type: ignore[index]
    with pytest.raises(TypeError):
        job.args["user"]["name"] = "mallory"
    with pytest.raises(AttributeError):
        job.args["user"]["roles"].append("root")
    with pytest.raises(AttributeError):
        job.args.pop("user")  # type: ignore[attr-defined]


def test_a_frozen_map_has_no_instance_dict_to_smuggle_state_into() -> None:
    with pytest.raises(AttributeError):
        FrozenMap({}).extra = 1  # type: ignore[attr-defined]


def test_changing_the_callers_dict_afterwards_does_not_change_the_job() -> None:
    args = {"user": {"name": "ada"}, "ids": [1]}
    job = make_job(args=args)
    args["user"]["name"] = "mallory"
    args["ids"].append(2)
    args["new"] = True
    assert thaw(job.args) == {"user": {"name": "ada"}, "ids": [1]}


def test_the_record_itself_is_frozen() -> None:
    job = make_job()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        job.status = JobStatus.RUNNING  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        job.metadata.requeue_count = 5  # type: ignore[misc]


def test_a_job_and_its_args_are_hashable_and_equal_by_value() -> None:
    one, two = make_job(args=NESTED), make_job(args=NESTED)
    assert one == two
    assert hash(one) == hash(two)
    assert hash(one.args) == hash(two.args)
    assert len({one, two}) == 1


def test_a_completed_job_with_a_result_is_still_hashable() -> None:
    running = start(make_job(), NOW).unwrap()
    decision = decide(running, Succeeded({"rows": [1, 2]}), NOW, Policies(), 0.5)
    assert isinstance(decision.job.result, FrozenMap)
    hash(decision.job)


def test_repr_hides_arg_values() -> None:
    job = make_job(args={"password": CANARY, "nested": {"token": [CANARY]}})
    assert CANARY not in repr(job)
    assert CANARY not in str(job)
    assert "2 keys hidden" in repr(job)


def test_repr_hides_the_result() -> None:
    running = start(make_job(), NOW).unwrap()
    done = decide(running, Succeeded({"token": CANARY}), NOW, Policies(), 0.5).job
    assert CANARY not in repr(done)


def test_a_decision_repr_does_not_leak_args_through_the_job() -> None:
    running = start(make_job(args={"password": CANARY}), NOW).unwrap()
    decision = decide(running, Succeeded(None), NOW, Policies(), 0.5)
    assert CANARY not in repr(decision)


def test_reveal_is_the_explicit_opt_in_that_shows_args_and_result() -> None:
    job = make_job(args={"password": CANARY})
    assert CANARY in job.reveal()
    running = start(job, NOW).unwrap()
    done = decide(running, Succeeded({"echo": "result-canary"}), NOW, Policies(), 0.5).job
    assert "result-canary" in done.reveal()


def test_repr_still_names_the_job() -> None:
    job = make_job(job_type="report.build", queue="reports")
    text = repr(job)
    assert str(job.id) in text
    assert "report.build" in text
    assert "reports" in text
    assert "pending" in text


def test_priorities_rank_critical_high_normal_low() -> None:
    ranks = [p.rank for p in (Priority.CRITICAL, Priority.HIGH, Priority.NORMAL, Priority.LOW)]
    assert ranks == sorted(ranks)
    assert len(set(ranks)) == 4


def test_priority_order_lists_every_priority_most_urgent_first() -> None:
    assert tuple(sorted(Priority, key=lambda p: p.rank)) == PRIORITY_ORDER
    assert PRIORITY_ORDER[0] is Priority.CRITICAL
    assert PRIORITY_ORDER[-1] is Priority.LOW


def test_a_priority_ranks_by_its_place_in_the_claim_order() -> None:
    # Stored by the backends (the Redis partition index scores by it): never renumber.
    assert [p.rank for p in PRIORITY_ORDER] == [0, 1, 2, 3]


def test_only_completed_failed_and_cancelled_are_terminal() -> None:
    terminal = {s for s in JobStatus if s.is_terminal}
    assert terminal == {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED}


def test_only_scheduled_and_retrying_are_parked() -> None:
    assert {s for s in JobStatus if s.is_parked} == {JobStatus.SCHEDULED, JobStatus.RETRYING}


def test_freeze_of_a_frozen_value_is_equal_to_it() -> None:
    frozen = freeze(NESTED)
    assert freeze(frozen) == frozen
