"""A PostgreSQL server of a fault test's own, so the test may crash and restart it.

The shared test server (`conveyor.testing.postgres_server`) is not ours to
restart. This one is initialised in a fresh directory under /tmp with the
binaries on PATH (or those bundled in the `pgserver` wheel), listens on a Unix
socket only with trust authentication, and runs with the settings
`docs/reliability.md` recommends (`fsync` and `synchronous_commit` on). As root
it runs as `nobody`, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any


def _binaries() -> Path:
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).parent
    try:
        from pgserver._commands import POSTGRES_BIN_PATH
    except ImportError as exc:
        raise RuntimeError("no initdb/pg_ctl on PATH and no pgserver wheel") from exc
    return Path(POSTGRES_BIN_PATH)


class PgCluster:
    """`start()`, `crash()` (an immediate shutdown: no checkpoint, WAL replayed on the
    next start, as after a power cut of the server process), `cleanup()`."""

    def __init__(self) -> None:
        self.bin = _binaries()
        self.dir = Path(tempfile.mkdtemp(prefix="conveyor-fpg-", dir="/tmp"))
        self.dir.chmod(0o755)
        self.data = self.dir / "data"
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            os.chown(self.dir, nobody.pw_uid, nobody.pw_gid)
            self._as = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@/postgres?host={self.dir}"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [str(self.bin / tool), *args], check=True, capture_output=True, timeout=60, **self._as
        )

    def start(self) -> PgCluster:
        options = f"-h '' -k {self.dir} -c fsync=on -c synchronous_commit=on"
        log = str(self.dir / "log")
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", log, "-o", options, "start")
        return self

    def crash(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def cleanup(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
