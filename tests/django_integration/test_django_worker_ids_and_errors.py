"""Worker ids of a running attempt, and how the Django backend reports a bad
configuration: a small project on SQLite (written into the test's folder), driven
through `python -m django` (what `manage.py` runs) in subprocesses, and the backend's
pure parts in this process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from conveyor.core import Attempt, AttemptOutcome, Job, JobStatus, Priority, freeze
from conveyor.django.backend import ConveyorBackend
from conveyor.django.results import pack_call, worker_ids_of
from probe_apps import APPS
from test_django6 import _venv_python

DJANGO = [sys.executable, "-m", "django"]

SETTINGS = (
    """
import json, os
import django
"""
    + APPS
    + """DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(os.environ["PROBE_DIR"], "probe.db"),
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 10},
    }
}
TASKS = {
    "default": {
        "BACKEND": "conveyor.django.ConveyorBackend",
        "QUEUES": ["default"],
        "OPTIONS": {
            "MODULES": json.loads(os.environ.get("PROBE_MODULES", "[]")),
            "CONFIG": {
                "lease_ms": 3000,
                "workers": {"count": 1, "poll_interval_ms": 50},
                "retry": {"initial_delay_ms": 50, "jitter": False},
            },
        },
    }
}
"""
)

TASKS = """
import json, os, time

from conveyor.django.compat import task_finished, task_started

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

DIR = os.environ["PROBE_DIR"]


def note(kind, result):
    line = {"kind": kind, "status": str(result.status), "worker_ids": list(result.worker_ids)}
    with open(os.path.join(DIR, "seen.jsonl"), "a") as out:
        out.write(json.dumps(line) + "\\n")


task_started.connect(lambda sender, task_result, **kw: note("task_started", task_result), weak=False)
task_finished.connect(lambda sender, task_result, **kw: note("task_finished", task_result), weak=False)


@task(takes_context=True, retries=1)
def held(context):
    # Each attempt runs until the driver lets it go; the first one then fails.
    note("context", context.task_result)
    release = os.path.join(DIR, f"release-{context.attempt}")
    deadline = time.monotonic() + 30
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.02)
    if context.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return context.attempt
"""

DRIVER = """
import json, os, signal, subprocess, sys, time

import django

django.setup()

import conveyor
from django.core.management import call_command
from probe.tasks import held

DIR = os.environ["PROBE_DIR"]


def read_until(result_id, wanted, timeout=10.0):
    # The last result read: the one `wanted` accepted, or the one read at the timeout.
    end = time.monotonic() + timeout
    found = held.get_backend().get_result(result_id)
    while not wanted(found) and time.monotonic() < end:
        time.sleep(0.02)
        found = held.get_backend().get_result(result_id)
    return found


call_command("conveyor", "migrate", stdout=open(os.devnull, "w"))
log = open(os.path.join(DIR, "worker.log"), "w")
worker = subprocess.Popen(
    [sys.executable, "-m", "django", "conveyor", "worker"], stdout=log, stderr=subprocess.STDOUT
)
try:
    result = held.enqueue()
    running = []
    for attempt in (1, 2):
        # The task holds each attempt until released: RUNNING is read while it runs.
        seen = read_until(
            result.id, lambda r: str(r.status) == "RUNNING" and len(r.worker_ids) == attempt
        )
        running.append([str(seen.status), list(seen.worker_ids)])
        open(os.path.join(DIR, f"release-{attempt}"), "w").close()
    final = read_until(result.id, lambda r: str(r.status) in ("SUCCESSFUL", "FAILED"))
finally:
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
out = {
    "conveyor": conveyor.__file__,
    "worker_pid": worker.pid,
    "running": running,
    "final": [str(final.status), list(final.worker_ids)],
}
print(json.dumps(out))
"""


def _project(tmp_path: Path) -> Path:
    """The probe project: settings, an app with one task, and the driver script."""
    app = tmp_path / "probe"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text(TASKS)
    (tmp_path / "probe_settings.py").write_text(SETTINGS)
    (tmp_path / "driver.py").write_text(DRIVER)
    return tmp_path


def _in(project: Path, modules: list[str] | None = None) -> dict[str, Any]:
    """`subprocess.run` arguments that run in `project`, with `modules` as
    `OPTIONS["MODULES"]`."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "probe_settings",
        "PROBE_DIR": str(project),
        "PROBE_MODULES": json.dumps(modules or []),
        # The project first, then whatever this interpreter was given.
        "PYTHONPATH": os.pathsep.join(p for p in (str(project), os.environ.get("PYTHONPATH")) if p),
    }
    return {"cwd": project, "env": env, "capture_output": True, "text": True, "timeout": 120}


# ---- worker ids -------------------------------------------------------------------


def test_each_attempt_shows_the_id_of_the_worker_running_it_everywhere(tmp_path: Path) -> None:
    project = _project(tmp_path)
    done = subprocess.run([sys.executable, "driver.py"], **_in(project))
    log = project / "worker.log"
    assert done.returncode == 0, done.stderr[-4000:] + (
        log.read_text()[-3000:] if log.exists() else ""
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    status, ids = out["final"]
    assert status == "SUCCESSFUL" and len(ids) == 2
    worker = ids[0]
    host, pid, _ = worker.split(":")  # host:pid:worker, as the docs say
    assert (host, int(pid)) == (socket.gethostname(), out["worker_pid"])
    assert ids == [worker, worker]  # one worker ran both attempts
    seen = [json.loads(line) for line in (project / "seen.jsonl").read_text().splitlines()]
    assert [(s["kind"], s["status"], s["worker_ids"]) for s in seen] == [
        ("task_started", "RUNNING", [worker]),
        ("context", "RUNNING", [worker]),
        ("task_started", "RUNNING", [worker, worker]),
        ("context", "RUNNING", [worker, worker]),
        ("task_finished", "SUCCESSFUL", [worker, worker]),
    ]
    # Another process, reading while each attempt runs, cannot know its worker yet
    # (the SQL store records it at the attempt's end): "", never the one before.
    assert out["running"] == [["RUNNING", [""]], ["RUNNING", [worker, ""]]]


def _job(status: JobStatus, attempts: tuple[Attempt, ...], worker: str | None) -> Job:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    return Job(
        id=uuid4(),
        job_type="probe.tasks.held",
        args=freeze(pack_call([], {}, priority=0, backend="default", run_after=None)),
        queue="default",
        priority=Priority.NORMAL,
        status=status,
        created_at=now,
        run_at=now,
        attempts=attempts,
        worker=worker,
    )


def test_a_record_written_before_the_start_never_names_the_previous_attempts_worker() -> None:
    # What the SQL store holds while a retry runs: the record as the retry left it,
    # naming the worker of attempt 1, whoever runs attempt 2.
    now = datetime(2026, 1, 2, tzinfo=UTC)
    first = Attempt(1, now, now + timedelta(seconds=1), AttemptOutcome.RETRIED, "h:1:aaaa", None)
    stored = _job(JobStatus.RETRYING, (first,), worker="h:1:aaaa")
    assert worker_ids_of(stored, JobStatus.RUNNING) == ["h:1:aaaa", ""]
    assert worker_ids_of(stored, JobStatus.RUNNING, "h:2:bbbb") == ["h:1:aaaa", "h:2:bbbb"]
    # The started record (a worker's own, or a store that writes the start) names it.
    started = _job(JobStatus.RUNNING, (first,), worker="h:2:bbbb")
    assert worker_ids_of(started, JobStatus.RUNNING) == ["h:1:aaaa", "h:2:bbbb"]


# ---- OPTIONS["MODULES"] -----------------------------------------------------------


@pytest.fixture(params=["this", "django6"])
def python(request: pytest.FixtureRequest) -> str:
    """This interpreter, or Django 6's (the cached virtualenv of `test_django6`, which
    is skipped where no Python 3.12 is found): Django 6 registers the tasks checks
    only once `django.tasks` is imported."""
    return sys.executable if request.param == "this" else _venv_python()


def test_a_modules_entry_that_cannot_be_imported_fails_manage_py_check(
    tmp_path: Path, python: str
) -> None:
    project = _project(tmp_path)
    bad = ["probe.tasks", "does.not.exist"]
    done = subprocess.run([python, "-m", "django", "check"], **_in(project, bad))
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "conveyor.E001" in line]
    assert len(errors) == 1
    assert (
        "TASKS['default']: OPTIONS['MODULES'][1]: 'does.not.exist' cannot be imported" in errors[0]
    )
    assert "ModuleNotFoundError: No module named 'does'" in errors[0]


def test_enqueue_and_the_worker_refuse_a_bad_modules_entry_as_improperly_configured(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    run = _in(project, ["does.not.exist"])
    assert subprocess.run([*DJANGO, "conveyor", "migrate"], **run).returncode == 0
    named = "TASKS['default']: OPTIONS['MODULES'][0]: 'does.not.exist' cannot be imported"
    enqueue = (
        "from probe.tasks import held\n"
        "try:\n"
        "    held.enqueue()\n"
        "except Exception as exc:\n"
        "    print(f'{type(exc).__module__}.{type(exc).__name__}: {exc}')\n"
    )
    refused = subprocess.run([*DJANGO, "shell", "-c", enqueue], **run)
    assert (
        refused.stdout.strip()
        .splitlines()[-1]
        .startswith(f"django.core.exceptions.ImproperlyConfigured: {named}")
    )
    worker = subprocess.run([*DJANGO, "conveyor", "worker"], **run)
    assert worker.returncode == 1
    assert f"conveyor: ImproperlyConfigured: {named}" in worker.stderr


# ---- manage.py conveyor's errors --------------------------------------------------


def test_a_command_error_is_one_line_and_status_1_as_for_any_django_command(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    done = subprocess.run([*DJANGO, "conveyor", "--backend", "nope", "status"], **_in(project))
    assert (done.returncode, done.stderr) == (
        1,
        "CommandError: The connection 'nope' doesn't exist.\n",
    )
    shown = subprocess.run(
        [*DJANGO, "conveyor", "--traceback", "--backend", "nope", "status"], **_in(project)
    )
    assert shown.returncode == 1
    assert shown.stderr.startswith("Traceback (most recent call last):")
    assert shown.stderr.endswith("CommandError: The connection 'nope' doesn't exist.\n")


# ---- OPTIONS["CONFIG"] ------------------------------------------------------------


def test_workers_queues_given_as_a_string_is_one_error_asking_for_a_list(tmp_path: Path) -> None:
    backend = ConveyorBackend(
        "default",
        {
            "QUEUES": ["default"],
            "OPTIONS": {
                "URL": f"sqlite:///{tmp_path / 'jobs.db'}",
                "CONFIG": {"workers": {"queues": "default"}},
            },
        },
    )
    messages = list(backend.check())
    assert [m.id for m in messages] == ["conveyor.E001"]
    assert messages[0].msg == (
        "TASKS['default']: OPTIONS['CONFIG']['workers']['queues']: must be a list of "
        "queue names, got 'default'"
    )
