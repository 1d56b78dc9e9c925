"""`cron list` shows a workflow entry's last slot by the workflow's state as a whole
(running until every step has ended, then completed, failed, cancelled or ended), on
every backend: a slot whose first step died is `failed`, though its last step was
only cancelled for it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from backends import Backend
from conveyor import Permanent
from conveyor.core.cron import slot_id
from conveyor.core.dependencies import WorkflowOutcome
from conveyor.shell.config import Config
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from conveyor.shell.runtime.workflows import Workflow
from conveyor.testing import drain
from conveyor.testing.clock import ManualClock

T0 = datetime(2026, 6, 1, 10, 0, 30, tzinfo=UTC)
SLOT = T0.replace(second=0) + timedelta(minutes=1)


def fetch_then_mail(wf: Workflow, slot: datetime) -> None:
    fetch = wf.add("fetch", {"day": slot.isoformat()}, name="fetch")
    wf.add("mail", {}, after=[fetch], name="mail")


def runtime(backend: Backend, fetch: Any) -> Runtime:
    registry = Registry({"fetch": fetch, "mail": lambda args: "sent"})
    rt = Runtime(Config(provider="memory"), backend.queue, backend.store, registry, clock=ManualClock(T0))  # type: ignore[arg-type]
    rt.cron.add_workflow("nightly", "1-59 * * * *", fetch_then_mail)
    rt.cron.tick()  # the first check lets the slot before the start go
    rt.clock.set(SLOT)  # type: ignore[attr-defined]
    assert [j.status.value for j in rt.cron.tick()] == ["pending", "waiting"]
    return rt


def last_state(rt: Runtime) -> Any:
    (row,) = rt.cron.list()
    assert row.last_job_id == str(slot_id("nightly", SLOT))
    assert row.to_dict()["last_run"]["state"] == row.last_state.value
    return row.last_state


def test_a_slot_is_running_until_every_step_ends_then_completed(backend: Backend) -> None:
    rt = runtime(backend, lambda args: "fetched")
    assert last_state(rt) is WorkflowOutcome.RUNNING, "no step has run yet"
    drain(rt, queues="default")
    assert last_state(rt) is WorkflowOutcome.COMPLETED


def test_a_slot_whose_first_step_died_is_failed_not_its_last_step_s_cancel(
    backend: Backend,
) -> None:
    def fetch(args: Any) -> None:
        raise Permanent("the source is gone")

    rt = runtime(backend, fetch)
    drain(rt, queues="default")
    members = rt.workflow(slot_id("nightly", SLOT)).members  # type: ignore[union-attr]
    assert [m.state.value for m in members] == ["failed", "cancelled"]  # type: ignore[union-attr]
    assert last_state(rt) is WorkflowOutcome.FAILED
