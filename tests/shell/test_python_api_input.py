"""Bad input to the Python API is a `ValidationError` naming the field and why, at the
call, every problem at once: never a bare `TypeError` or `ValueError` from deep
inside, and never a call that silently does nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor import Workflow
from conveyor.core import ValidationError
from conveyor.testing import ManualClock, drain


@pytest.fixture
def runtime() -> Any:
    made = conveyor.build(
        {"provider": "memory"}, handlers={"x": lambda a: a}, clock=ManualClock(), env={}
    )
    yield made
    made.close()


def test_enqueue_many_names_each_bad_args_entry_by_its_index_all_at_once(runtime: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        runtime.enqueue_many("x", [{}, {"a": float("nan")}, [1], {"b": 1}])
    fields = [e.field for e in refused.value.errors]
    assert fields == ["args_list[1]", "args_list[2]"], refused.value
    assert "NaN" in refused.value.errors[0].reason
    assert runtime.list_jobs() == [], "nothing was written"
    with pytest.raises(ValidationError) as first:
        runtime.enqueue_many("x", [{"a": float("inf")}, {}], queue="bad queue!")
    assert [e.field for e in first.value.errors] == ["queue", "args_list[0]"], first.value


def test_a_single_enqueue_still_names_its_args(runtime: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        runtime.enqueue("x", {"a": float("nan")})
    assert [e.field for e in refused.value.errors] == ["args"]


@pytest.mark.parametrize("bad", ["zzz", 5, ""])
def test_a_workflow_id_that_is_no_uuid_is_refused_naming_id(bad: object) -> None:
    with pytest.raises(ValidationError) as refused:
        Workflow(id=bad)  # type: ignore[arg-type]
    assert [e.field for e in refused.value.errors] == ["id"]


@pytest.mark.parametrize("bad", ["", 5])
def test_a_step_name_must_be_a_non_empty_string(bad: object) -> None:
    flow = Workflow()
    with pytest.raises(ValidationError) as refused:
        flow.add("x", {}, name=bad)  # type: ignore[arg-type]
    assert [e.field for e in refused.value.errors] == ["name"]


def test_drain_takes_one_queue_name_as_a_string(runtime: Any) -> None:
    # A string was read as a list of one-letter queues: nothing ran, and a test passed.
    runtime.enqueue("x", {}, queue="emails")
    assert drain(runtime, queues="emails").processed == 1
    from conveyor.testing import DrainLimit
    from conveyor.testing.drain import DrainLimit as Defined

    assert DrainLimit is Defined


@pytest.mark.parametrize(
    ("value", "reason"),
    [("1", "must be a whole number of milliseconds, got '1'"), (-5, "must be >= 0, got -5")],
)
def test_prune_names_older_than_ms_and_refuses_what_is_no_number(
    runtime: Any, value: object, reason: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        runtime.prune(older_than_ms=value)
    assert str(refused.value) == f"older_than_ms: {reason}"


def test_binding_tasks_to_what_is_no_runtime_is_refused_at_bind() -> None:
    tasks = conveyor.Tasks()

    @tasks.task(name="t")
    def t(args: Any) -> None:
        return None

    with pytest.raises(ValidationError) as refused:
        tasks.bind(5)  # type: ignore[arg-type]
    assert [e.field for e in refused.value.errors] == ["runtime"]


def test_a_task_in_a_script_run_as_main_is_told_it_needs_a_name(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        "import conveyor\ntasks = conveyor.Tasks()\n@tasks.task\ndef send(args):\n    return None\n"
    )
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1
    last = ran.stderr.strip().splitlines()[-1]
    assert "run as __main__" in last and "pass name=" in last, last


@pytest.mark.parametrize(
    ("given", "fields"),
    [({"queue": ""}, ["queue"]), ({"queue": "bad q!", "job_type": ""}, ["queue", "job_type"])],
)
def test_cancel_many_refuses_a_name_no_job_can_have(
    runtime: Any, given: dict[str, str], fields: list[str]
) -> None:
    # It answered 0 cancelled, as if there were just nothing to cancel; the CLI refused.
    with pytest.raises(ValidationError) as refused:
        runtime.cancel_many(**given)
    assert [e.field for e in refused.value.errors] == fields


def test_the_testing_helpers_refuse_a_filter_no_job_can_match(runtime: Any) -> None:
    from conveyor.testing import assert_enqueued, enqueued_jobs

    runtime.enqueue("x", {})
    with pytest.raises(ValidationError) as refused:
        enqueued_jobs(runtime, 5)  # type: ignore[arg-type]
    assert [e.field for e in refused.value.errors] == ["job_type"]
    with pytest.raises(ValidationError) as negative:
        assert_enqueued(runtime, "x", count=-1)
    assert [e.field for e in negative.value.errors] == ["count"]
    assert len(assert_enqueued(runtime, "x", count=1)) == 1
