"""What the figures were measured on: machine, versions, server settings, source state."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from .limits import PgLimit
from .systems import Env

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "conveyor",
    "redis",
    "psycopg",
    "sqlalchemy",
    "huey",
    "dramatiq",
    "procrastinate",
    "pgqueuer",
    "matplotlib",
)
#: The distribution a package is installed as, where its name differs.
_DISTRIBUTIONS = {"conveyor": "conveyor-jobs"}


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


_REF: dict[str, str] = {}


def _run_git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def use_ref(ref: str) -> None:
    """Import `conveyor` from `src/` as committed at `ref`, not from the work tree.

    The package is exported to a scratch folder put first on `sys.path`, ahead of the
    editable install's finder; spawned worker processes inherit `sys.path`. Call this
    before anything imports `conveyor`.
    """
    commit = _run_git("rev-parse", "--short", ref)
    if not commit:
        raise SystemExit(f"unknown git ref {ref!r}")
    folder = Path(tempfile.mkdtemp(prefix="conveyor-bench-src-"))
    archive = folder / "src.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", commit, "src"], cwd=ROOT, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    (folder / "src").rename(folder / "conveyor")
    sys.path.insert(0, str(folder))
    _REF.update(ref=ref, commit=commit, path=str(folder))


def git_state() -> dict[str, Any]:
    if _REF:
        return {"commit": _REF["commit"], "src_uncommitted": [], "ref": _REF["ref"]}
    dirty = [line[3:] for line in _run_git("status", "--porcelain", "--", "src").splitlines()]
    return {"commit": _run_git("rev-parse", "--short", "HEAD"), "src_uncommitted": dirty}


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(_DISTRIBUTIONS.get(name, name))
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    out["python"] = platform.python_version()
    out["sqlite"] = sqlite3.sqlite_version
    return out


def collect(env: Env, pg: PgLimit) -> dict[str, Any]:
    import conveyor
    import psycopg

    client = env.redis_client(decode=True)
    try:
        info = client.info("server")
        redis_version = str(info.get("redis_version"))
        aof = client.config_get("appendonly").get("appendonly")
        fsync = client.config_get("appendfsync").get("appendfsync")
    finally:
        client.close()
    with psycopg.connect(pg.conninfo, autocommit=True) as conn:
        pg_version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    return {
        "machine": {
            "cores": os.cpu_count(),
            "cpu": _cpu(),
            "memory_gib": _memory_gib(),
            "os": f"{platform.system()} {platform.release()}",
        },
        "versions": {**versions(), "redis-server": redis_version, "postgresql": pg_version},
        "servers": {
            "redis": {"appendonly": aof, "appendfsync": fsync, "binary": env.redis.binary},
            "postgresql": pg.settings,
        },
        "git": git_state(),
        "conveyor_imported_from": str(Path(conveyor.__file__).parent),
    }
