"""The runtime built from config: handlers contributed, pools, web nodes, loud queues."""

from __future__ import annotations

import logging
import sys
import textwrap
import time

import conveyor
import pytest
from conveyor.core import JobStatus, ValidationError
from conveyor.shell.ports import is_transactional


@pytest.fixture
def handler_module(tmp_path, monkeypatch):
    (tmp_path / "shop_jobs.py").write_text(
        textwrap.dedent(
            """
            DONE = []
            def ship(args):
                DONE.append(args["order"])
                return {"shipped": args["order"]}
            HANDLERS = {"ship-order": ship}
            def make():
                return {"refund": lambda args: "ok"}
            NOT_A_MAPPING = 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("shop_jobs", None)


def _memory(**extra):
    return {"provider": "memory", "entry_points": False, **extra}


def test_handlers_are_contributed_by_module_path(handler_module) -> None:
    rt = conveyor.build(_memory(handlers=["shop_jobs:HANDLERS", "shop_jobs:make"]))
    assert rt.registry.job_types() == {"ship-order", "refund"}
    rt.enqueue("ship-order", {"order": 7})
    stats = rt.drain()
    assert stats.completed == 1
    import shop_jobs

    assert shop_jobs.DONE == [7]


def test_a_bad_contribution_names_the_entry(handler_module) -> None:
    with pytest.raises(ValidationError) as info:
        conveyor.build(_memory(handlers=["shop_jobs:NOT_A_MAPPING", "no_such_mod:X"]))
    assert info.value.fields == ("handlers[0]", "handlers[1]")


def test_handlers_are_contributed_by_entry_point(handler_module, monkeypatch) -> None:
    dist = handler_module / "shop_jobs-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shop-jobs\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[conveyor.handlers]\nshop = shop_jobs:HANDLERS\n")
    rt = conveyor.build({"provider": "memory"})
    assert "ship-order" in rt.registry.job_types()


def test_a_web_node_enqueues_and_processes_nothing() -> None:
    ran = []
    rt = conveyor.build(_memory(workers={"count": 0}), handlers={"w": ran.append})
    rt.enqueue("w", {})
    rt.start()
    time.sleep(0.2)
    rt.stop()
    assert ran == [] and rt.pools == []
    assert rt.queue.counts(rt.clock.now())["default"].ready == 1


def test_enqueue_on_an_unpolled_queue_warns_once_naming_the_fix(caplog) -> None:
    rt = conveyor.build(_memory(), handlers={"push": lambda a: None})
    with caplog.at_level(logging.WARNING, logger="conveyor.runtime"):
        rt.enqueue("push", {}, queue="push")
        rt.enqueue("push", {}, queue="push")
    warnings = [r.getMessage() for r in caplog.records if "push" in r.getMessage()]
    assert len(warnings) == 1
    assert "workers.queues" in warnings[0]
    [row] = [q for q in rt.status().queues if q.queue == "push"]
    assert row.flagged and not row.configured


def test_a_polled_queue_with_a_live_worker_is_not_flagged() -> None:
    rt = conveyor.build(_memory(workers={"count": 1, "poll_interval_ms": 10}), handlers={})
    rt.enqueue("nobody-handles-this", {}, delay=60)
    rt.start()
    try:
        [row] = [q for q in rt.status().queues if q.queue == "default"]
        assert row.scheduled == 1 and row.pollers and not row.flagged
    finally:
        rt.stop(1)


def test_enqueue_rejects_bad_input_naming_the_field() -> None:
    rt = conveyor.build(_memory())
    with pytest.raises(ValidationError) as info:
        rt.enqueue("", {"x": object()}, priority="urgent")
    assert set(info.value.fields) == {"job_type", "args", "priority"}


def test_only_the_sql_provider_enqueues_in_a_transaction(tmp_path) -> None:
    assert not is_transactional(conveyor.build(_memory()).queue)
    with pytest.raises(ValidationError):
        conveyor.build(_memory()).enqueue_in_tx(None, "x", {})
    sql = conveyor.build({"url": f"sqlite:///{tmp_path / 'x.db'}", "entry_points": False})
    assert is_transactional(sql.queue)


def test_a_dead_letter_can_be_retried_and_purged(tmp_path) -> None:
    calls = []

    def flaky(args):
        calls.append(1)
        if len(calls) == 1:
            raise conveyor.Permanent("first time fails")
        return "ok"

    rt = conveyor.build(
        {"url": f"sqlite:///{tmp_path / 'x.db'}", "entry_points": False}, handlers={"f": flaky}
    )
    job = rt.enqueue("f", {})
    rt.drain()
    assert [j.id for j in rt.list_dead()] == [job.id]
    rt.retry_dead(job.id)
    assert rt.list_dead() == []
    rt.drain()
    record = rt.get(job.id)
    assert record is not None and record.state is JobStatus.COMPLETED
    assert rt.purge_dead() == 0


def test_a_failed_job_survives_a_restart_on_sqlite(tmp_path) -> None:
    config = {"url": f"sqlite:///{tmp_path / 'x.db'}", "entry_points": False}

    def boom(args):
        raise conveyor.Permanent("no")

    first = conveyor.build(config, handlers={"b": boom})
    job = first.enqueue("b", {})
    first.drain()
    first.close()
    second = conveyor.build(config)
    assert [j.id for j in second.list_dead()] == [job.id]


def test_enqueue_many_validates_every_job_before_writing_any() -> None:
    rt = conveyor.build(_memory(), handlers={"w": lambda a: None})
    with pytest.raises(ValidationError):
        rt.enqueue_many("w", [{"ok": 1}, {"bad": float("nan")}])
    assert rt.queue.counts(rt.clock.now()) == {}
    jobs = rt.enqueue_many("w", [{"i": i} for i in range(5)], priority="high")
    assert rt.drain().completed == 5 and all(j.priority.value == "high" for j in jobs)


def test_sqlite_status_reads_beside_an_open_write_transaction(tmp_path) -> None:
    """Read-only work never takes SQLite's write lock: `status` answers while another
    process holds a write transaction open (it used to fail with "database is locked")."""
    import sqlite3

    path = tmp_path / "jobs.db"
    config = {"provider": "db", "url": f"sqlite:///{path}", "workers": {"count": 0}}
    conveyor.build(config).close()  # the tables exist, as on any node after the first
    writer = sqlite3.connect(path, timeout=0)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE held_by_a_writer (x)")
    try:
        began = time.monotonic()
        rt = conveyor.build(config)
        try:
            status = rt.status()
        finally:
            rt.close()
        assert status.queues == () or all(q.ready == 0 for q in status.queues)
        assert time.monotonic() - began < 2, "status waited for the writer"
    finally:
        writer.rollback()
        writer.close()


def test_a_misspelt_job_type_is_warned_about_once_with_the_closest_names(caplog) -> None:
    rt = conveyor.build({"provider": "memory"}, handlers={"send-receipt": lambda a: None})
    with caplog.at_level(logging.WARNING, logger="conveyor.runtime"):
        rt.enqueue("send-reciept", {})
        rt.enqueue("send-reciept", {})
        rt.enqueue("send-receipt", {})
    warnings = [r.getMessage() for r in caplog.records if "handler module" in r.getMessage()]
    assert len(warnings) == 1
    assert "'send-reciept'" in warnings[0] and "did you mean 'send-receipt'" in warnings[0]


def test_a_workflow_step_of_a_misspelt_type_or_unpolled_queue_warns_as_an_enqueue_does(
    caplog,
) -> None:
    # A workflow's steps were written without either warning.
    rt = conveyor.build({"provider": "memory"}, handlers={"send-receipt": lambda a: None})
    wf = conveyor.Workflow()
    first = wf.add("send-receipt")
    wf.add("send-reciept", after=[first], queue="mail")
    with caplog.at_level(logging.WARNING, logger="conveyor.runtime"):
        rt.enqueue(wf)
    warnings = [r.getMessage() for r in caplog.records]
    assert any("did you mean 'send-receipt'" in w for w in warnings), warnings
    assert any("queue 'mail', which no worker pool" in w for w in warnings), warnings


def test_a_worker_starting_warns_of_a_timeout_or_cron_entry_for_a_misspelt_type(caplog) -> None:
    # A timeout under a misspelt type applied to nothing, silently.
    rt = conveyor.build(
        {
            "provider": "memory",
            "timeouts_ms": {"report.biuld": 1000, "report.build": 2000},
            "cron": [{"name": "nightly", "schedule": "0 3 * * *", "job_type": "tikc"}],
        },
        handlers={"report.build": lambda a: None, "tick": lambda a: None},
        env={},
    )
    with caplog.at_level(logging.WARNING, logger="conveyor.runtime"):
        rt.start()
        rt.stop()
    told = [r.getMessage() for r in caplog.records if r.name == "conveyor.runtime"]
    assert len(told) == 2, told
    assert told[0].startswith("timeouts_ms.report.biuld: ") and "'report.build'" in told[0]
    assert told[1].startswith("cron entry 'nightly': ") and "did you mean 'tick'" in told[1]


def test_a_worker_starting_warns_of_limits_for_a_queue_no_pool_polls(caplog) -> None:
    # `[limits.paymnets]` left `payments` uncapped without a word.
    rt = conveyor.build(
        {
            "provider": "memory",
            "workers": {"queues": ["payments", "default"]},
            "limits": {"paymnets": {"max_running": 1}, "payments": {"max_running": 2}},
        },
        handlers={"charge": lambda a: None},
        env={},
    )
    with caplog.at_level(logging.WARNING, logger="conveyor.runtime"):
        rt.start()
        rt.stop()
    told = [r.getMessage() for r in caplog.records if r.name == "conveyor.runtime"]
    assert told == [
        "limits.paymnets: no worker pool polls queue 'paymnets' (workers.queues = "
        "['payments', 'default']), so these limits apply to nothing here; did you mean "
        "'payments'?"
    ]


def test_a_node_that_loads_no_handlers_cannot_tell_a_misspelt_type() -> None:
    rt = conveyor.build({"provider": "memory", "workers": {"count": 0}})
    assert rt.unknown_job_type("anything") is None
