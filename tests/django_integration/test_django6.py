"""The same scenario on Django 6 (`django.tasks`, built in), which needs Python 3.12
or newer: run by such an interpreter from a cached virtualenv, `.venv-django6/` at
the repository's root, built on first use (`pip install -e '.[django,postgres]'`,
about 15 s) and reused after. With no such interpreter the tests are skipped, saying
so. `CONVEYOR_DJANGO6_PYTHON` names an interpreter to use."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from typing import Any

import pytest
from conveyor.testing.postgres_server import fresh_database
from shop_run import ROOT, run_scenario

VENV = ROOT / ".venv-django6"
PROBE = "import sys, django, psycopg, conveyor.django; assert django.VERSION >= (6,)"


def _interpreter() -> str | None:
    """A Python 3.12 or newer: `CONVEYOR_DJANGO6_PYTHON`, on PATH, or under pyenv."""
    named = os.environ.get("CONVEYOR_DJANGO6_PYTHON")
    found = [named] if named else []
    found += [p for p in (shutil.which(f"python3.{minor}") for minor in (14, 13, 12)) if p]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))
    for python in found:
        try:
            done = subprocess.run(
                [python, "-c", "import sys; assert sys.version_info >= (3, 12)"],
                capture_output=True,
            )
        except OSError:  # a name that is not an interpreter
            continue
        if done.returncode == 0:
            return python
    return None


def _venv_python() -> str:
    """The cached Django 6 virtualenv's interpreter, built when missing or broken."""
    python = VENV / "bin" / "python"
    if (
        python.exists()
        and subprocess.run([python, "-c", PROBE], capture_output=True).returncode == 0
    ):
        return str(python)
    base = _interpreter()
    if base is None:
        pytest.skip(
            "Django 6 needs Python 3.12 or newer and none was found "
            "(set CONVEYOR_DJANGO6_PYTHON to one)"
        )
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([base, "-m", "venv", str(VENV)], check=True, capture_output=True)
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "-e", f"{ROOT}[django,postgres]"],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    probe = subprocess.run([python, "-c", PROBE], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr[-3000:]
    return str(python)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def shop6(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    python = _venv_python()
    folder = tmp_path_factory.mktemp(f"shop6-{request.param}")
    url = f"sqlite:///{folder / 'shop.db'}" if request.param == "sqlite" else fresh_database()
    return run_scenario(python, url, folder)


def test_django_6_binds_its_built_in_tasks_framework(shop6: Any) -> None:
    assert shop6["framework"] == "django.tasks"
    assert int(shop6["django"].split(".")[0]) >= 6


def test_on_django_6_rollback_leaves_no_job_and_commit_runs_it_once(shop6: Any) -> None:
    assert shop6["rolled_back"] == "absent"
    assert shop6["visible_to_others_before_commit"] is False
    assert shop6["committed"]["status"] == "SUCCESSFUL"
    assert shop6["runs"].count(f"receipt:{shop6['committed']['args'][0]}") == 1


def test_on_django_6_each_status_errors_context_async_and_priorities(shop6: Any) -> None:
    assert (shop6["queued"]["status"], shop6["scheduled"], shop6["running"]) == (
        "READY",
        "READY",
        "RUNNING",
    )
    assert shop6["failed"]["errors"] == ["orders.tasks.ReceiptRefused"]
    assert shop6["context"]["return_value"] == 2 and len(shop6["context"]["worker_ids"]) == 2
    assert shop6["async"]["return_value"] == 6
    assert [r for r in shop6["runs"] if r.startswith("p")] == ["p80", "p20", "p0", "p-20"]
    assert shop6["later"]["started_at"] >= shop6["run_after_due"]


def test_on_django_6_sigterm_stops_the_worker_gracefully(shop6: Any) -> None:
    assert shop6["worker_exit"] == 0
    assert shop6["drain"]["status"] == "SUCCESSFUL" and shop6["drain_rows"] == 1
    assert shop6["checks_before_migrate"] == ["conveyor.W001"]
