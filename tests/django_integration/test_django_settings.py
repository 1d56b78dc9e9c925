"""Django settings as the backend reads them, end to end: a small project (written into
the test's folder) driven through `python -m django` (what `manage.py` runs) in
subprocesses, on SQLite or on a real PostgreSQL database."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from conveyor.testing.postgres_server import drop_database, fresh_database
from sqlalchemy import create_engine, make_url, text

DJANGO = [sys.executable, "-m", "django"]

SETTINGS = """
import json, os
import django

SECRET_KEY = "test-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["conveyor.django", *json.loads(os.environ["PROBE_APPS"])]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")
DATABASES = {"default": json.loads(os.environ["PROBE_DATABASE"])}
TASKS = {
    "default": {
        "BACKEND": "conveyor.django.ConveyorBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"CONFIG": {"workers": {"count": 1, "poll_interval_ms": 50}}},
        **json.loads(os.environ.get("PROBE_TASKS", "{}")),
    },
    **json.loads(os.environ.get("PROBE_MORE_TASKS", "{}")),
}
"""

ADD_TASK = """
try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


class Halt(BaseException):
    pass


@task()
def add(a, b):
    return a + b


@task()
def refuse(reason):
    raise ValueError(reason)


@task()
def halt():
    raise Halt("stop")
"""

# Enqueues each call its arguments name (a task of `probe.tasks` and its arguments),
# runs a worker (its output in worker.log) until all are done, and prints what
# `get_result` saw of each.
RUN = """
import json, signal, subprocess, sys, time

import django

django.setup()

from probe import tasks

results = [getattr(tasks, name).enqueue(*args) for name, *args in json.loads(sys.argv[1])]
log = open("worker.log", "w")
worker = subprocess.Popen(
    [sys.executable, "-m", "django", "conveyor", "worker"], stdout=log, stderr=subprocess.STDOUT
)
try:
    end = time.monotonic() + 60
    seen = [r.task.get_result(r.id) for r in results]
    while any(str(r.status) not in ("SUCCESSFUL", "FAILED") for r in seen):
        if time.monotonic() > end:
            break
        time.sleep(0.05)
        seen = [r.task.get_result(r.id) for r in results]
finally:
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
out = [
    {
        "id": r.id,
        "status": str(r.status),
        "value": r.return_value if str(r.status) == "SUCCESSFUL" else None,
        "errors": [e.exception_class_path for e in r.errors],
    }
    for r in seen
]
print(json.dumps(out))
"""


# Enqueues twice while the database is down and prints what each enqueue raised.
UNREACHABLE = """
import django

django.setup()

from probe import tasks

for _ in range(2):
    try:
        tasks.add.enqueue(1, 2)
    except Exception as exc:
        print(type(exc).__name__ + ": " + str(exc))
"""


def _run(run: dict[str, Any], *calls: list[Any]) -> list[dict[str, Any]]:
    """What `get_result` saw of each call (`[task name, *args]`) once a worker ran them."""
    done = subprocess.run([sys.executable, "run.py", json.dumps(calls)], **run)
    assert done.returncode == 0, done.stderr[-3000:]
    seen: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def _project(
    tmp_path: Path, database: dict[str, Any], apps: dict[str, str], **tasks: Any
) -> dict[str, Any]:
    """A project on Django's `database` whose installed apps are `apps` (name: the
    source of its `tasks` module), with `tasks` over `TASKS['default']`'s keys;
    `subprocess.run` arguments that run in it."""
    for name, source in apps.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
        (tmp_path / name / "tasks.py").write_text(source)
    (tmp_path / "probe_settings.py").write_text(SETTINGS)
    (tmp_path / "run.py").write_text(RUN)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "probe_settings",
        "PROBE_APPS": json.dumps(list(apps)),
        "PROBE_DATABASE": json.dumps(database),
        "PROBE_TASKS": json.dumps(tasks),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p
        ),
    }
    return {"cwd": tmp_path, "env": env, "capture_output": True, "text": True, "timeout": 120}


def _sqlite(tmp_path: Path) -> dict[str, Any]:
    return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "probe.db")}


def _pg_project(tmp_path: Path, url: str, options: dict[str, Any]) -> dict[str, Any]:
    """The probe project on the PostgreSQL database `url`, with `options` as
    `DATABASES['default']['OPTIONS']`."""
    parsed = make_url(url)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parsed.database,
        "USER": parsed.username or "",
        "HOST": parsed.query.get("host") or parsed.host or "",
        "PORT": str(parsed.port or ""),
        "OPTIONS": options,
    }
    return _project(tmp_path, database, {"probe": ADD_TASK})


def _check_errors(run: dict[str, Any]) -> list[str]:
    """The conveyor errors `manage.py check` reports (it must fail)."""
    done = subprocess.run([*DJANGO, "check"], **run)
    assert done.returncode == 1, done.stderr
    return [line for line in done.stderr.splitlines() if "conveyor.E0" in line]


def test_a_search_path_in_databases_options_holds_conveyors_tables_end_to_end(
    tmp_path: Path,
) -> None:
    url = fresh_database()
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE SCHEMA app"))
        run = _pg_project(tmp_path, url, {"options": "-c search_path=app"})
        migrated = subprocess.run([*DJANGO, "conveyor", "migrate"], **run)
        assert migrated.returncode == 0, migrated.stderr
        checked = subprocess.run([*DJANGO, "check"], **run)
        assert checked.returncode == 0 and "conveyor." not in checked.stderr, checked.stderr
        [seen] = _run(run, ["add", 1, 2])
        assert (seen["status"], seen["value"]) == ("SUCCESSFUL", 3)
        with engine.connect() as conn:
            schemas = conn.execute(
                text(
                    "SELECT DISTINCT table_schema FROM information_schema.tables"
                    " WHERE table_schema IN ('app', 'public')"
                )
            ).scalars()
            assert sorted(schemas) == ["app"]
    finally:
        engine.dispose()
        drop_database(url)


def test_a_databases_option_conveyor_cannot_carry_fails_manage_py_check(tmp_path: Path) -> None:
    # Nothing connects: the option is refused before the tables are looked at.
    url = "postgresql+psycopg://shop@db.invalid/shop"
    run = _pg_project(tmp_path, url, {"assume_role": "shop_owner", "sslmode": "require"})
    done = subprocess.run([*DJANGO, "check"], **run)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "conveyor.E001" in line]
    assert len(errors) == 1
    assert "TASKS['default']: DATABASES['default']['OPTIONS']['assume_role']: " in errors[0]


# ---- the project's task modules ---------------------------------------------------

BROKEN = "import does_not_exist_xyz\n"
OTHER_QUEUE = ADD_TASK.replace("@task()", '@task(queue_name="emails")')
ENQUEUE = (
    "from probe.tasks import add\n"
    "try:\n"
    "    add.enqueue(1, 2)\n"
    "except Exception as exc:\n"
    "    print(f'{type(exc).__module__}.{type(exc).__name__}: {exc}')\n"
)


def test_an_installed_apps_tasks_module_that_cannot_be_imported_is_named(tmp_path: Path) -> None:
    run = _project(tmp_path, _sqlite(tmp_path), {"probe": ADD_TASK, "broken": BROKEN})
    named = "'broken.tasks' cannot be imported: ModuleNotFoundError: No module named"
    errors = _check_errors(run)
    assert len(errors) == 1
    assert f"TASKS['default']: INSTALLED_APPS: {named} 'does_not_exist_xyz'" in errors[0]
    assert subprocess.run([*DJANGO, "conveyor", "migrate"], **run).returncode == 0
    refused = subprocess.run([*DJANGO, "shell", "-c", ENQUEUE], **run)
    assert (
        refused.stdout.strip()
        .splitlines()[-1]
        .startswith(
            "django.core.exceptions.ImproperlyConfigured: TASKS['default']: INSTALLED_APPS: "
            + named
        )
    )
    worker = subprocess.run([*DJANGO, "conveyor", "worker"], **run)
    assert worker.returncode == 1
    assert f"ImproperlyConfigured: TASKS['default']: INSTALLED_APPS: {named}" in worker.stderr


def test_a_task_on_a_queue_queues_does_not_name_is_named_with_the_queue(tmp_path: Path) -> None:
    run = _project(tmp_path, _sqlite(tmp_path), {"probe": ADD_TASK, "mail": OTHER_QUEUE})
    errors = _check_errors(run)
    assert len(errors) == 1
    assert (
        "'mail.tasks' cannot be imported: InvalidTaskError: task 'mail.tasks.add': "
        "queue_name 'emails' is not one of the backend's QUEUES (default)"
    ) in errors[0]


# ---- OPTIONS["CONFIG"] ------------------------------------------------------------


def test_a_bad_config_key_is_named_by_the_checks_the_enqueue_and_the_worker(
    tmp_path: Path,
) -> None:
    options = {"CONFIG": {"lease_ms": "x"}}
    run = _project(tmp_path, _sqlite(tmp_path), {"probe": ADD_TASK}, OPTIONS=options)
    named = "TASKS['default']: OPTIONS['CONFIG']['lease_ms']: must be an integer, got 'x'"
    errors = _check_errors(run)
    assert len(errors) == 1 and named in errors[0]
    refused = subprocess.run([*DJANGO, "shell", "-c", ENQUEUE], **run)
    assert refused.stdout.strip().splitlines()[-1] == (
        f"django.core.exceptions.ImproperlyConfigured: {named}"
    )
    worker = subprocess.run([*DJANGO, "conveyor", "worker"], **run)
    assert worker.returncode == 1
    assert f"ImproperlyConfigured: {named}" in worker.stderr


# ---- the command a warning or an error asks for -----------------------------------


def test_each_backend_is_told_its_own_migrate_command_and_an_outage_none(
    tmp_path: Path,
) -> None:
    run = _project(tmp_path, _sqlite(tmp_path), {"probe": ADD_TASK})
    url = f"sqlite:///{tmp_path / 'separate.db'}"
    gone = f"sqlite:///{tmp_path / 'no-such-folder' / 'jobs.db'}"
    run["env"]["PROBE_MORE_TASKS"] = json.dumps(
        {
            "separate": {"BACKEND": "conveyor.django.ConveyorBackend", "OPTIONS": {"URL": url}},
            "gone": {"BACKEND": "conveyor.django.ConveyorBackend", "OPTIONS": {"URL": gone}},
        }
    )
    done = subprocess.run([*DJANGO, "check"], **run)
    assert done.returncode == 0, done.stderr
    told = {
        line.split("TASKS['")[1].split("'")[0]: (line, hint)
        for line, hint in zip(done.stderr.splitlines(), done.stderr.splitlines()[1:], strict=False)
        if "(conveyor.W00" in line
    }
    assert sorted(told) == ["default", "gone", "separate"]
    assert "(conveyor.W001)" in told["default"][0]
    assert '"manage.py conveyor migrate"' in told["default"][0]
    assert told["default"][1].strip() == "HINT: run: python manage.py conveyor migrate"
    assert "(conveyor.W001)" in told["separate"][0]
    assert '"manage.py conveyor --backend separate migrate"' in told["separate"][0]
    assert told["separate"][1].strip() == (
        "HINT: run: python manage.py conveyor --backend separate migrate"
    )
    assert "(conveyor.W002)" in told["gone"][0]
    assert "migrate" not in told["gone"][1]
    enqueue = ENQUEUE.replace("add.enqueue", "add.using(backend='separate').enqueue")
    refused = subprocess.run([*DJANGO, "shell", "-c", enqueue], **run)
    last = refused.stdout.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: TASKS['separate']: ")
    assert '"python manage.py conveyor --backend separate migrate"' in last


# ---- a failed task ----------------------------------------------------------------


def test_a_failed_task_is_named_by_its_exceptions_full_path_even_a_base_exception(
    tmp_path: Path,
) -> None:
    run = _project(tmp_path, _sqlite(tmp_path), {"probe": ADD_TASK})
    assert subprocess.run([*DJANGO, "conveyor", "migrate"], **run).returncode == 0
    refused, halted = _run(run, ["refuse", "no stamps"], ["halt"])
    assert (refused["status"], refused["errors"]) == ("FAILED", ["builtins.ValueError"])
    assert (halted["status"], halted["errors"]) == ("FAILED", ["probe.tasks.Halt"])


def test_a_failed_task_is_logged_with_its_own_exception_and_traceback(tmp_path: Path) -> None:
    run = _project(tmp_path, _sqlite(tmp_path), {"probe": ADD_TASK})
    assert subprocess.run([*DJANGO, "conveyor", "migrate"], **run).returncode == 0
    results = _run(run, ["refuse", "no stamps"], ["halt"])
    assert [r["status"] for r in results] == ["FAILED", "FAILED"]
    log = (tmp_path / "worker.log").read_text()
    # The tasks framework's receiver logs a failure with `logger.exception`: Django's
    # backends send `task_finished` in the except block, so its traceback is the task's.
    for result, raised in zip(results, ["ValueError: no stamps", "Halt: stop"], strict=True):
        told = log[log.index(f"Task id={result['id']} ") :].splitlines()
        told = told[next(i for i, line in enumerate(told) if "state=FAILED" in line) :]
        assert told[1] == "Traceback (most recent call last):", told[:3]
        assert any(line.endswith(raised) for line in told[2:30]), told[:30]
    assert "NoneType: None" not in log


def test_an_enqueue_is_told_at_once_when_the_database_is_unreachable(tmp_path: Path) -> None:
    """The enqueueing side of a project tries the server once per enqueue, and a request
    fails as Django's own query would: it waited out the worker's start-up timeout
    (30 s), every thread that enqueued meanwhile queued behind the shared runtime."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "USER": "shop",
        "PASSWORD": "s3cret",
        "HOST": "127.0.0.1",
        "PORT": str(port),
    }
    run = _project(tmp_path, database, {"probe": ADD_TASK})
    (tmp_path / "unreachable.py").write_text(UNREACHABLE)
    done = subprocess.run([sys.executable, "unreachable.py"], **run)
    assert done.returncode == 0, done.stderr[-3000:]
    told = done.stdout.strip().splitlines()
    assert len(told) == 2, done.stdout
    for line in told:
        assert line.startswith("ServerUnreachable: ") and "is unreachable" in line, line
        assert "gave up after waiting" not in line, line
    assert "s3cret" not in done.stdout
