"""The example shop on Django 5.2 and the `django_tasks` backport (this interpreter),
on SQLite and PostgreSQL: one scenario run per database (`scenario.py`, in a
subprocess, with `manage.py conveyor worker` in another), each test one thing it saw."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import pytest
from conveyor.testing.postgres_server import fresh_database
from shop_run import run_scenario


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def shop(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp(f"shop-{request.param}")
    url = f"sqlite:///{folder / 'shop.db'}" if request.param == "sqlite" else fresh_database()
    return run_scenario(sys.executable, url, folder)


def test_the_backport_is_the_framework_bound_on_django_5(shop: Any) -> None:
    assert shop["framework"] == "django_tasks"
    assert shop["django"].startswith("5.2")


def test_a_missing_migration_is_a_check_warning_until_conveyor_migrate_runs(shop: Any) -> None:
    assert shop["checks_before_migrate"] == ["conveyor.W001"]
    assert shop["checks_after_migrate"] == []


def test_an_enqueue_before_conveyor_migrate_says_to_run_it(shop: Any) -> None:
    refused = shop["enqueue_before_migrate"]
    assert refused.startswith("ImproperlyConfigured: TASKS['default']: the database schema")
    assert '"python manage.py conveyor migrate"' in refused


def test_a_rolled_back_transaction_leaves_no_job_and_no_row(shop: Any) -> None:
    assert shop["rolled_back"] == "absent"
    assert shop["orders_after_rollback"] == 0


def test_the_job_is_written_by_the_callers_connection_unseen_by_others_until_commit(
    shop: Any,
) -> None:
    assert shop["visible_to_own_connection_before_commit"] is True
    assert shop["visible_to_others_before_commit"] is False
    assert shop["visible_after_commit"] == "READY"


def test_a_backend_with_its_own_database_keeps_the_job_of_a_rolled_back_transaction(
    shop: Any,
) -> None:
    assert shop["separate_after_rollback"] == "READY"


def test_a_committed_task_runs_once_and_returns_its_value(shop: Any) -> None:
    done = shop["committed"]
    assert done["status"] == "SUCCESSFUL"
    assert done["return_value"] == {"order": done["args"][0], "item": "book"}
    assert done["attempts"] == 1 and len(done["worker_ids"]) == 1
    assert shop["receipt_sent"] is True
    assert shop["runs"].count(f"receipt:{done['args'][0]}") == 1


def test_get_result_in_another_process_shows_each_status(shop: Any) -> None:
    assert shop["queued"]["status"] == "READY"
    assert shop["queued"]["started_at"] is None and shop["queued"]["worker_ids"] == []
    assert shop["scheduled"] == "READY"
    assert shop["running"] == "RUNNING"
    assert shop["slow"]["status"] == "SUCCESSFUL"
    assert shop["failed"]["status"] == "FAILED"


def test_a_failing_task_lists_its_error_class_path_and_traceback(shop: Any) -> None:
    failed = shop["failed"]
    assert failed["errors"] == ["orders.tasks.ReceiptRefused"]
    assert "raise ReceiptRefused(reason)" in failed["tracebacks"][0]
    assert "no stamps" in failed["tracebacks"][0]
    assert failed["finished_at"] is not None and failed["return_value"] is None


def test_an_async_task_runs_and_keeps_its_args_and_kwargs(shop: Any) -> None:
    done = shop["async"]
    assert done["status"] == "SUCCESSFUL" and done["return_value"] == 6
    assert done["args"] == [[1, 2, 3]] and done["kwargs"] == {"label": "async"}
    assert "async" in shop["runs"]


def test_a_task_taking_context_sees_its_attempt_and_each_attempt_has_a_worker_id(
    shop: Any,
) -> None:
    done = shop["context"]
    assert done["status"] == "SUCCESSFUL" and done["return_value"] == 2
    assert done["attempts"] == 2 and len(done["worker_ids"]) == 2
    assert done["errors"] == ["orders.tasks.ReceiptRefused"]
    assert shop["runs"].index("flaky:1") < shop["runs"].index("flaky:2")
    assert done["last_attempted_at"] > done["started_at"]


def test_higher_django_priorities_run_first(shop: Any) -> None:
    order = [label for label in shop["runs"] if label.startswith("p")]
    assert order == ["p80", "p20", "p0", "p-20"]


def test_run_after_holds_the_task_until_it_is_due(shop: Any) -> None:
    later = shop["later"]
    assert later["status"] == "SUCCESSFUL"
    assert later["run_after"] == shop["run_after_due"]
    assert datetime.fromisoformat(later["started_at"]) >= datetime.fromisoformat(
        shop["run_after_due"]
    )


def test_the_worker_sends_task_started_and_task_finished(shop: Any) -> None:
    log = shop["worker_log"]
    assert "orders: refuse started (attempt 1)" in log
    assert "orders: refuse finished FAILED" in log
    assert "orders: flaky started (attempt 2)" in log
    assert "orders: total finished SUCCESSFUL" in log


def test_sigterm_lets_the_running_task_finish_then_the_worker_exits(shop: Any) -> None:
    assert shop["drain_running"] == "RUNNING"
    assert shop["worker_exit"] == 0
    assert shop["drain"]["status"] == "SUCCESSFUL"
    assert shop["drain_rows"] == 1
    assert "SIGTERM, stopping gracefully" in shop["worker_log"]


def test_the_worker_runs_the_apps_tasks_and_those_of_options_modules_only(shop: Any) -> None:
    first = shop["worker_log"].splitlines()[0]
    handlers = first.split("handlers=")[1].split(",")
    assert handlers == [
        "orders.tasks.flaky",
        "orders.tasks.record",
        "orders.tasks.refuse",
        "orders.tasks.send_receipt",
        "orders.tasks.slow",
        "orders.tasks.total",
        "shop_probes.previous_connection_closed",  # OPTIONS["MODULES"]
    ]


def test_conveyor_options_come_from_the_task_or_the_backends_options(shop: Any) -> None:
    assert shop["options"] == {
        "unique_same_id": True,
        "partition": "tenant-7",
        "timeout_ms": [5000, 60000],  # `.using(timeout=5)`; OPTIONS["TIMEOUT"] = 60
        "max_retries": [1, 0],  # `@task(retries=1)`; OPTIONS default
    }


def test_task_enqueued_is_sent_for_each_enqueue(shop: Any) -> None:
    sent, made, same_ids = shop["enqueue_signals"]
    assert sent == made and same_ids


def test_aenqueue_and_aget_result(shop: Any) -> None:
    assert shop["aenqueued"] == "READY"
    assert shop["aenqueued_after"]["status"] == "SUCCESSFUL"
    assert shop["aenqueued_after"]["return_value"] == 9


def test_bad_task_options_are_refused_when_the_task_is_made(shop: Any) -> None:
    retries, queue, priority = shop["refused"]
    assert retries.startswith("InvalidTask") and "retries must be" in retries
    assert queue.startswith("InvalidTask") and "nowhere" in queue
    assert priority.startswith("InvalidTask") and "priority" in priority


def test_each_tasks_database_connection_is_closed_after_it_as_after_a_request(
    shop: Any,
) -> None:
    # The probe keeps each run's connection and asks whether the previous one is closed:
    # without close_old_connections around each task it would still be open.
    assert sorted(shop["probes"], key=str) == [None, True, True]  # None: the first run
