"""The Django backend's pure parts: priorities, states, options, the config file, the
errors and worker ids a result shows, and the checks of a misconfigured backend."""

from __future__ import annotations

import re
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

import pytest
from conveyor.core import (
    Attempt,
    AttemptOutcome,
    ErrorInfo,
    Job,
    JobStatus,
    Priority,
    freeze,
)
from conveyor.django.backend import ConveyorBackend
from conveyor.django.compat import TaskResultStatus
from conveyor.django.config_file import toml_text
from conveyor.django.options import (
    conveyor_config,
    database_options_problems,
    database_url,
    read_options,
)
from conveyor.django.results import (
    STATUS_OF,
    django_priority_order,
    errors_of,
    exception_class_path,
    pack_call,
    worker_ids_of,
)
from sqlalchemy import make_url

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("priority", "order"),
    [
        (100, Priority.CRITICAL),
        (50, Priority.CRITICAL),
        (49, Priority.HIGH),
        (1, Priority.HIGH),
        (0, Priority.NORMAL),
        (-1, Priority.LOW),
        (-100, Priority.LOW),
    ],
)
def test_django_priorities_fall_into_conveyors_four_orders(priority: int, order: Priority) -> None:
    assert django_priority_order(priority) is order


def test_waiting_in_any_form_is_ready_and_every_end_but_success_is_failed() -> None:
    assert {state.value: str(status) for state, status in STATUS_OF.items()} == {
        "scheduled": "READY",
        "waiting": "READY",
        "pending": "READY",
        "retrying": "READY",
        "running": "RUNNING",
        "completed": "SUCCESSFUL",
        "failed": "FAILED",
        "cancelled": "FAILED",
    }
    assert set(STATUS_OF) == set(JobStatus)
    assert set(STATUS_OF.values()) == set(TaskResultStatus)


def _job(status: JobStatus, attempts: tuple[Attempt, ...], **fields: object) -> Job:
    call = pack_call([1], {"a": 2}, priority=0, backend="default", run_after=None)
    return Job(
        id=uuid4(),
        job_type="shop.tasks.send",
        args=freeze(call),
        queue="default",
        priority=Priority.NORMAL,
        status=status,
        created_at=NOW,
        run_at=NOW,
        attempts=attempts,
        **fields,  # type: ignore[arg-type]
    )


def _attempt(n: int, outcome: AttemptOutcome, worker: str, error: ErrorInfo | None) -> Attempt:
    return Attempt(
        n, NOW + timedelta(seconds=n), NOW + timedelta(seconds=n + 1), outcome, worker, error
    )


def test_each_failed_attempt_is_an_error_and_each_attempt_that_ran_a_worker_id() -> None:
    boom = ErrorInfo("shop.errors.Boom", "no", True, "Traceback ...\nshop.errors.Boom: no\n")
    job = _job(
        JobStatus.RUNNING,
        (
            _attempt(1, AttemptOutcome.RETRIED, "w1", boom),
            _attempt(2, AttemptOutcome.REQUEUED, "w2", None),  # no handler there: never ran
            _attempt(3, AttemptOutcome.RETRIED, "w3", ErrorInfo("ValueError", "bad", True, None)),
        ),
        worker="w4",
    )
    errors = errors_of(job)
    assert [e.exception_class_path for e in errors] == ["shop.errors.Boom", "builtins.ValueError"]
    assert errors[0].traceback.endswith("shop.errors.Boom: no\n")
    assert errors[1].traceback == "ValueError: bad\n"  # no traceback stored: the message
    assert worker_ids_of(job, JobStatus.RUNNING) == ["w1", "w3", "w4"]
    assert worker_ids_of(job, JobStatus.RETRYING) == ["w1", "w3"]


def test_a_task_no_worker_had_shows_no_attempt_that_ran_it() -> None:
    # Its final dead letter (no-handler) was shown as an attempt of a worker.
    no_handler = ErrorInfo("no-handler", "no worker has a handler for it", False)
    job = _job(
        JobStatus.FAILED,
        (
            _attempt(1, AttemptOutcome.REQUEUED, "w1", None),
            _attempt(2, AttemptOutcome.DEAD_LETTERED, "w2", no_handler),
        ),
        last_error=no_handler,
    )
    assert worker_ids_of(job, JobStatus.FAILED) == []
    assert [e.exception_class_path for e in errors_of(job)] == ["no-handler"]


def test_a_dead_letter_with_no_failed_attempt_lists_its_reason() -> None:
    job = _job(JobStatus.FAILED, (), last_error=ErrorInfo("poison-pill", "lease lost", False))
    assert [e.exception_class_path for e in errors_of(job)] == ["poison-pill"]


def test_exception_class_paths() -> None:
    assert exception_class_path("orders.tasks.ReceiptRefused") == "orders.tasks.ReceiptRefused"
    assert exception_class_path("KeyError") == "builtins.KeyError"
    assert exception_class_path("Timeout") == "Timeout"  # Conveyor's own, kept as is


def test_bad_options_are_each_named() -> None:
    found = read_options(
        ["default", "bad queue!"],
        {
            "RETRIES": -1,
            "TIMEOUT": 0,
            "URL": 3,
            "DATABASE": "x",
            "CONFIG": {"provider": "redis"},
            "COLOUR": 1,
        },
    )
    fields = sorted(p.field for p in found.problems)
    assert fields == sorted(
        [
            "QUEUES",
            "OPTIONS['COLOUR']",
            "OPTIONS",
            "OPTIONS['URL']",
            "OPTIONS['RETRIES']",
            "OPTIONS['TIMEOUT']",
            "OPTIONS['CONFIG']['provider']",
        ]
    )


def test_good_options_make_the_conveyor_config() -> None:
    found = read_options({"emails", "default"}, {"RETRIES": 2, "CONFIG": {"workers": {"count": 3}}})
    assert found.problems == () and found.transactional and found.database == "default"
    config = conveyor_config(found, "sqlite:////srv/shop.db")
    assert config["provider"] == "db" and config["url"] == "sqlite:////srv/shop.db"
    assert config["workers"] == {"count": 3, "queues": ["default", "emails"]}
    assert config["handlers"] == ["conveyor.django.handlers:project_tasks"]
    assert config["auto_migrate"] is False
    assert not read_options(["default"], {"URL": "sqlite:////x.db"}).transactional


def test_django_database_settings_become_a_url() -> None:
    assert database_url({"ENGINE": "django.db.backends.sqlite3", "NAME": Path("/srv/shop.db")}) == (
        "sqlite:////srv/shop.db"
    )
    pg = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "USER": "app",
        "PASSWORD": "p@ss",
        "HOST": "/run/postgresql",
        "PORT": "5433",
    }
    assert database_url(pg) == "postgresql+psycopg://app:p%40ss@:5433/shop?host=%2Frun%2Fpostgresql"
    with pytest.raises(ValueError, match="in-memory"):
        database_url({"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"})
    with pytest.raises(ValueError, match="not supported"):
        database_url({"ENGINE": "django.db.backends.mysql", "NAME": "shop"})


def test_the_config_file_reads_back_as_the_config() -> None:
    config = {
        "url": 'sqlite:////tmp/a "b".db',
        "workers": {"count": 2, "queues": ["a", "b"]},
        "retry": {"jitter": False, "initial_delay_ms": 100},
        "cron": [{"schedule": "* * * * *", "job_type": "x.y"}],
        "ratio": 0.5,
        "skipped": None,
    }
    expected = {k: v for k, v in config.items() if v is not None}
    assert tomllib.loads(toml_text(config)) == expected


def test_a_misconfigured_backend_fails_its_checks_with_each_problem() -> None:
    backend = ConveyorBackend("default", {"QUEUES": ["default"], "OPTIONS": {"RETRIES": "x"}})
    messages = list(backend.check())
    assert [m.id for m in messages] == ["conveyor.E001"]
    assert "OPTIONS['RETRIES']" in messages[0].msg


def test_workers_polling_a_queue_queues_does_not_name_fail_the_checks(tmp_path: Path) -> None:
    backend = ConveyorBackend(
        "default",
        {
            "QUEUES": ["default"],
            "OPTIONS": {
                "URL": f"sqlite:///{tmp_path / 'jobs.db'}",
                "CONFIG": {"workers": {"queues": ["default", "reports"]}},
            },
        },
    )
    ids = [m.id for m in backend.check()]
    assert ids == ["conveyor.E003", "conveyor.W001"]  # and the tables are not there yet


def test_the_priority_table_in_the_docs_is_the_mapping() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "django.md").read_text()
    rows = re.findall(r"^\| (-?\d+) to (-?\d+)(?: \(the default\))? \| `(\w+)` \|$", page, re.M)
    rows += [
        (n, n, order)
        for n, order in re.findall(r"^\| (-?\d+) \(the default\) \| `(\w+)` \|$", page, re.M)
    ]
    covered = set()
    for low, high, order in rows:
        for priority in (int(low), int(high)):
            assert django_priority_order(priority).value == order, (priority, order)
        covered |= set(range(int(low), int(high) + 1))
    assert covered == set(range(-100, 101))


def test_a_url_conveyor_cannot_use_fails_the_checks() -> None:
    backend = ConveyorBackend("default", {"OPTIONS": {"URL": "mysql://shop@db/shop"}})
    messages = list(backend.check())
    assert [m.id for m in messages] == ["conveyor.E001"]
    assert "OPTIONS['URL']: names 'mysql'" in messages[0].msg


def test_an_unreachable_database_is_a_check_warning(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder" / "jobs.db"  # SQLite cannot create it there
    backend = ConveyorBackend("default", {"OPTIONS": {"URL": f"sqlite:///{missing}"}})
    assert [m.id for m in backend.check()] == ["conveyor.W002"]


def test_libpq_parameters_in_databases_options_reach_conveyors_url() -> None:
    pg = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "HOST": "db",
        "OPTIONS": {
            "sslmode": "verify-full",
            "sslrootcert": "/etc/ca.pem",
            "connect_timeout": 7,
            "options": "-c search_path=app",
            "application_name": "shop",
            # Django's own: how its connections behave, nothing about where they lead.
            "isolation_level": 2,
            "server_side_binding": True,
            "pool": True,
        },
    }
    query = make_url(database_url(pg)).query
    assert dict(query) == {
        "sslmode": "verify-full",
        "sslrootcert": "/etc/ca.pem",
        "connect_timeout": "7",
        "options": "-c search_path=app",
        "application_name": "shop",
    }
    service = {"ENGINE": "django.db.backends.postgresql", "OPTIONS": {"service": "shop"}}
    assert database_url(service) == "postgresql+psycopg://?service=shop"


def test_a_databases_option_conveyor_cannot_carry_is_named_with_why() -> None:
    pg = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "OPTIONS": {"sslmode": "require", "assume_role": "owner", "cursor_factory": object},
    }
    problems = [str(p) for p in database_options_problems("jobs", pg)]
    assert [p.split(": ")[0] for p in problems] == [
        "DATABASES['jobs']['OPTIONS']['assume_role']",
        "DATABASES['jobs']['OPTIONS']['cursor_factory']",
    ]
    assert "-c role=" in problems[0]
    with pytest.raises(
        ValueError, match=re.escape("DATABASES['default']['OPTIONS']['assume_role']")
    ):
        database_url(pg)
    sqlite = {"ENGINE": "django.db.backends.sqlite3", "NAME": "/x.db", "OPTIONS": {"timeout": 9}}
    assert database_options_problems("default", sqlite) == []


def test_a_config_the_worker_would_refuse_fails_the_checks_naming_each_key(
    tmp_path: Path,
) -> None:
    config = {"bogus": 1, "lease_ms": "x", "workers": {"count": "two"}, "cron": [{}]}
    backend = ConveyorBackend(
        "default",
        {
            "QUEUES": ["default"],
            "OPTIONS": {"URL": f"sqlite:///{tmp_path / 'jobs.db'}", "CONFIG": config},
        },
    )
    messages = list(backend.check())
    assert {m.id for m in messages} == {"conveyor.E001"}
    named = sorted(m.msg.split(": ")[1] for m in messages)
    assert named == [
        "OPTIONS['CONFIG']['bogus']",
        "OPTIONS['CONFIG']['cron'][0]['job_type']",
        "OPTIONS['CONFIG']['cron'][0]['name']",
        "OPTIONS['CONFIG']['cron'][0]['schedule']",
        "OPTIONS['CONFIG']['lease_ms']",
        "OPTIONS['CONFIG']['workers']['count']",
    ]
    assert any("workers']['count']: must be an integer, got 'two'" in m.msg for m in messages)


def test_queues_given_as_a_string_is_one_error_asking_for_a_list(tmp_path: Path) -> None:
    backend = ConveyorBackend(
        "default", {"QUEUES": "default", "OPTIONS": {"URL": f"sqlite:///{tmp_path / 'j.db'}"}}
    )
    assert [(m.id, m.msg) for m in backend.check()] == [
        ("conveyor.E001", "TASKS['default']: QUEUES: must be a list of queue names, not a string")
    ]


def test_a_traceback_option_after_conveyor_job_is_conveyors_own() -> None:
    from conveyor.django.management.commands.conveyor import _split_argv

    # `conveyor job show ID --traceback` prints each attempt's traceback.
    assert _split_argv(["job", "show", "1", "--traceback", "-v2"]) == (
        ["job", "show", "1", "--traceback"],
        False,
        None,
    )
    assert _split_argv(["--log-level", "jobs", "status", "--traceback"]) == (
        ["--log-level", "jobs", "status"],
        True,
        None,
    )
