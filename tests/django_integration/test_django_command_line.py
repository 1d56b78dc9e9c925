"""`manage.py conveyor`'s command line in a small project (`test_django_settings`'s):
Django's standard options, and `enqueue` of a task of the project."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from test_django_settings import ADD_TASK, DJANGO, _project, _sqlite

# ---- manage.py conveyor's command line --------------------------------------------


def test_djangos_standard_options_work_in_either_form_wherever_django_takes_them(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    run = _project(project, _sqlite(project), {"probe": ADD_TASK})
    # Only the options say where the project and its settings are.
    del run["env"]["DJANGO_SETTINGS_MODULE"]
    run["env"]["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    run["cwd"] = tmp_path
    where = [f"--pythonpath={project}", "--settings=probe_settings"]
    migrated = subprocess.run([*DJANGO, "conveyor", *where, "migrate"], **run)
    assert migrated.returncode == 0, migrated.stderr
    for line in (
        ["--pythonpath", str(project), "--settings", "probe_settings", "status"],
        ["status", *where, "--no-color", "-v", "2"],
        ["--backend=default", "--force-color", "status", "--verbosity=0", *where],
        ["--verbosity", "2", "-v3", "status", *where, "--backend", "default"],
    ):
        done = subprocess.run([*DJANGO, "conveyor", *line], **run)
        assert done.returncode == 0, (line, done.stderr)
    refused = subprocess.run([*DJANGO, "conveyor", *where, "--backend=nope", "status"], **run)
    assert (refused.returncode, refused.stderr) == (
        1,
        "CommandError: The connection 'nope' doesn't exist.\n",
    )
    shown = subprocess.run(
        [*DJANGO, "conveyor", "status", "--backend=nope", *where, "--traceback"], **run
    )
    assert shown.returncode == 1
    assert shown.stderr.startswith("Traceback (most recent call last):")


# ---- manage.py conveyor enqueue ---------------------------------------------------

# The job `manage.py conveyor enqueue` wrote beside the one `add.enqueue` writes.
SAME_JOB = """
import json, sys
from conveyor.core import thaw
from conveyor.django.compat import task_backends
from probe.tasks import add

runtime = task_backends["default"].runtime
def seen(id):
    job = runtime.get(id).job
    call = thaw(job.args)
    return [job.queue, job.priority.value, job.max_retries, job.timeout_ms, call["args"], call["kwargs"]]
print(json.dumps([seen(sys.argv[-1]), seen(add.enqueue(1, b=2).id)]))
"""


def test_conveyor_enqueue_makes_the_job_the_backends_enqueue_makes_and_refuses_the_same(
    tmp_path: Path,
) -> None:
    options = {"RETRIES": 1, "TIMEOUT": 30}
    run = _project(tmp_path, _sqlite(tmp_path), {"probe": ADD_TASK}, OPTIONS=options)
    assert subprocess.run([*DJANGO, "conveyor", "migrate"], **run).returncode == 0
    call = '{"args": [1], "kwargs": {"b": 2}}'
    done = subprocess.run([*DJANGO, "conveyor", "enqueue", "probe.tasks.add", call], **run)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    (tmp_path / "same_job.py").write_text(SAME_JOB)
    shown = subprocess.run(
        [
            *DJANGO,
            "shell",
            "-c",
            f"import sys; sys.argv.append({job_id!r}); exec(open('same_job.py').read())",
        ],
        **run,
    )
    by_command, by_task = json.loads(shown.stdout.strip().splitlines()[-1])
    assert by_command == by_task == ["default", "normal", 1, 30000, [1], {"b": 2}]
    for line, named in (
        (["probe.tasks.add", '{"a": 1}'], "args"),
        (["probe.tasks.add", '{"args": 1}'], "args"),
        (["probe.tasks.add", call, "--queue", "emails"], "'emails'"),
        (["probe.tasks.nope", call], "'probe.tasks.nope'"),
        (["probe.tasks.add", call, "--tenant", "t1"], "--tenant"),
    ):
        refused = subprocess.run([*DJANGO, "conveyor", "enqueue", *line], **run)
        assert refused.returncode != 0, (line, refused.stdout)
        assert named in refused.stderr, (line, refused.stderr)
