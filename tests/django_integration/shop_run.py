"""Runs the example shop's scenario (`scenario.py`) in a subprocess and reads what it saw."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "django"
SCENARIO = Path(__file__).resolve().parent / "scenario.py"


def run_scenario(python: str, database_url: str, folder: Path) -> dict[str, Any]:
    """What the scenario saw, run by `python` on `database_url` (its worker's log in
    `folder`); fails with the scenario's own output when it fails."""
    env = {
        **os.environ,
        "SHOP_DATABASE_URL": database_url,
        "SCENARIO_WORKER_LOG": str(folder / "worker.log"),
        # The probe tasks (`shop_probes`), through OPTIONS["MODULES"].
        "SHOP_TASK_MODULES": "shop_probes",
        # A second backend with its tables in a database of their own.
        "SHOP_SEPARATE_URL": f"sqlite:///{folder / 'separate.db'}",
        "PYTHONPATH": str(Path(__file__).resolve().parent),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [python, str(SCENARIO)],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    log = folder / "worker.log"
    assert done.returncode == 0, (
        done.stdout[-3000:]
        + done.stderr[-6000:]
        + (log.read_text()[-3000:] if log.exists() else "")
    )
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen
