"""What the Django backend's `enqueue` accepts: a task no worker would find is refused
as it is enqueued (not dead-lettered minutes later), and a naive `run_after`, which
Django allows under `USE_TZ = False`, is read in the project's time zone. A small
project on SQLite, written into the test's folder, run in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

SETTINGS = """
import json, os
import django

SECRET_KEY = "test-only"
USE_TZ = os.environ["PROBE_USE_TZ"] == "1"
TIME_ZONE = "America/New_York"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["conveyor.django", "probe"]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(os.environ["PROBE_DIR"], "probe.db")}
}
TASKS = {
    "default": {
        "BACKEND": "conveyor.django.ConveyorBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"MODULES": json.loads(os.environ["PROBE_MODULES"])},
    }
}
"""

TASK = """
try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task
def {name}():
    return "ran"
"""

DRIVER = """
import json, os
from datetime import datetime

import django

django.setup()

from django.core.management import call_command
from probe.jobs import hidden
from probe.tasks import listed

call_command("conveyor", "migrate", stdout=open(os.devnull, "w"))
out = {}
try:
    out["hidden"] = str(hidden.enqueue().status)
except Exception as exc:
    out["hidden"] = f"{type(exc).__name__}: {exc}"
later = datetime(2031, 7, 1, 9, 30)  # naive
try:
    result = listed.using(run_after=later).enqueue()
except Exception as exc:
    out["naive"] = f"{type(exc).__name__}: {exc}"
else:
    read = listed.get_backend().get_result(result.id)
    view = listed.get_backend().runtime.get(result.id)
    out["naive"] = {
        "status": str(read.status),
        "run_at": view.job.run_at.isoformat(),
        "enqueued_at_naive": read.enqueued_at.tzinfo is None,
    }
for label, arg in (("set", {1, 2}), ("bytes", b"hi"), ("int_keys", {1: "a"})):
    try:
        out[label] = listed.get_backend().get_result(listed.enqueue(arg).id).args
    except Exception as exc:
        out[label] = type(exc).__name__
# A job whose queue the project no longer lists (QUEUES changed since) is still read.
import attrs

made = listed.enqueue()
backend = listed.get_backend()
backend.runtime.queue.enqueue(attrs.evolve(backend.runtime.get(made.id).job, queue="retired"))
try:
    read = backend.get_result(made.id)
    read.refresh()
    out["retired"] = [str(read.status), read.task.queue_name]
except Exception as exc:
    out["retired"] = f"{type(exc).__name__}: {exc}"
# A job whose task was renamed since: not a result here, but still a job.
made = listed.enqueue()
job = backend.runtime.get(made.id).job
backend.runtime.queue.enqueue(attrs.evolve(job, job_type="probe.tasks.renamed"))
try:
    backend.get_result(made.id)
except Exception as exc:
    out["renamed"] = f"{type(exc).__name__}: {exc}"
try:
    listed.enqueue(1, {"when": "now", "tags": [1, {"seen": {2, 3}}]})
except TypeError as exc:
    out["deep_set"] = str(exc)
out["retries"] = [listed.using(retries=2).retries, listed.using(retries=2).using(retries=None).retries]
print(json.dumps(out))
"""


def _run(tmp_path: Path, *, use_tz: bool, modules: list[str]) -> dict[str, Any]:
    app = tmp_path / "probe"
    app.mkdir(exist_ok=True)
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text(TASK.replace("{name}", "listed"))
    (app / "jobs.py").write_text(TASK.replace("{name}", "hidden"))
    (tmp_path / "probe_settings.py").write_text(SETTINGS)
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "probe_settings",
        "PROBE_DIR": str(tmp_path),
        "PROBE_USE_TZ": "1" if use_tz else "0",
        "PROBE_MODULES": json.dumps(modules),
        "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p),
    }
    done = subprocess.run(
        [sys.executable, "driver.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_a_task_outside_the_modules_workers_load_is_refused_as_it_is_enqueued(
    tmp_path: Path,
) -> None:
    # It was accepted, waited for a worker that had it and was dead-lettered as
    # no-handler; its result could not even be read.
    out = _run(tmp_path, use_tz=True, modules=[])
    # InvalidTask (InvalidTaskError in the backport).
    assert out["hidden"].startswith("InvalidTask")
    assert ": 'probe.jobs.hidden' is defined where no worker looks for tasks" in out["hidden"]
    assert "add 'probe.jobs' to MODULES" in out["hidden"]


def test_the_result_of_a_job_on_a_queue_the_project_no_longer_lists_is_read(
    tmp_path: Path,
) -> None:
    # get_result and refresh raised InvalidTask: the task was rebuilt on the job's
    # queue, which Django validates against the backend's QUEUES.
    assert _run(tmp_path, use_tz=True, modules=[])["retired"] == ["READY", "retired"]


def test_a_task_in_a_module_named_in_modules_is_taken(tmp_path: Path) -> None:
    assert _run(tmp_path, use_tz=True, modules=["probe.jobs"])["hidden"] == "READY"


def test_a_naive_run_after_is_read_in_the_projects_time_zone_without_use_tz(
    tmp_path: Path,
) -> None:
    # Django allows it under USE_TZ = False; it was refused as "run_at: must be
    # timezone-aware", naming a field the caller never wrote.
    out = _run(tmp_path, use_tz=False, modules=[])
    naive = out["naive"]
    assert isinstance(naive, dict), naive
    in_new_york = datetime(2031, 7, 1, 9, 30, tzinfo=ZoneInfo("America/New_York"))
    assert datetime.fromisoformat(naive["run_at"]) == in_new_york.astimezone(UTC)
    assert naive["status"] == "READY"
    assert naive["enqueued_at_naive"] is True, "times read as Django shows them: naive"


def test_an_option_given_as_none_to_using_is_left_as_it_was(tmp_path: Path) -> None:
    # As in Django's own `using`; it reset the task's retries to the backend default.
    assert _run(tmp_path, use_tz=True, modules=[])["retries"] == [2, 2]


def test_a_call_is_made_json_as_djangos_own_backends_make_it(tmp_path: Path) -> None:
    # A set was InvalidTask where Django's backends raise TypeError; bytes and integer
    # keys, which they take, were refused.
    out = _run(tmp_path, use_tz=True, modules=[])
    assert (out["set"], out["bytes"], out["int_keys"]) == ("TypeError", ["hi"], [{"1": "a"}])


def test_a_value_json_cannot_hold_is_named_by_where_it_is_in_the_call(
    tmp_path: Path,
) -> None:
    # Django's own message named the type only: "Unsupported type: <class 'set'>".
    said = _run(tmp_path, use_tz=True, modules=[])["deep_set"]
    assert said.startswith("args[1]['tags'][1]['seen']: "), said
    assert "set" in said


def test_a_job_whose_task_is_gone_is_no_result_but_says_it_is_still_queued(
    tmp_path: Path,
) -> None:
    said = _run(tmp_path, use_tz=True, modules=[])["renamed"]
    assert said.startswith("TaskResultDoesNotExist: "), said
    assert "'probe.tasks.renamed'" in said and "the job is still pending" in said, said
