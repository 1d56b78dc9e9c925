"""Import paths that moved keep working for a release, and say where the name went."""

from __future__ import annotations

import subprocess
import sys


def test_the_old_pool_module_warns_and_gives_the_same_worker_pool() -> None:
    code = (
        "import warnings\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n"
        "    import conveyor.shell.pool\n"
        "except DeprecationWarning as warning:\n"
        "    print(warning)\n"
        "else:\n"
        "    raise SystemExit('no warning')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "conveyor.shell.worker" in done.stdout


def test_the_worker_pool_is_one_class_under_every_name() -> None:
    import conveyor
    from conveyor.shell.worker import WorkerPool

    assert conveyor.WorkerPool is WorkerPool
