"""A real PostgreSQL server for tests, started on demand, one per process.

`postgres_url()` returns a SQLAlchemy URL (`postgresql+psycopg://...`):

* from `DATABASE_URL` when it is set (`postgres://` and `postgresql://` get the
  psycopg 3 driver), so CI can point at a service container;
* else from a server this process starts once, caches and stops at exit: first
  with the `pgserver` wheel (a dev dependency that bundles the binaries), then
  with `initdb`/`pg_ctl` from PATH. PostgreSQL refuses to run as root, so as root
  both run the server as an unprivileged user (`pgserver` creates one; the PATH
  fallback uses `nobody`) in a fresh directory under /tmp that user can reach.

The server listens on a Unix socket only, with trust authentication: it is for
tests on this host, never for data. When nothing works, `postgres_url()` raises
with every reason, so a test that needs PostgreSQL fails instead of skipping.
`fresh_database()` gives a test module its own empty database.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, make_url, text

__all__ = ["drop_database", "fresh_database", "postgres_url", "with_psycopg"]

_lock = threading.Lock()
_url: str | None = None


def with_psycopg(url: str) -> str:
    """`url` with the psycopg 3 driver when it names plain `postgres`/`postgresql`."""
    for scheme in ("postgres://", "postgresql://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme) :]
    return url


def postgres_url() -> str:
    """A URL of a running PostgreSQL server: `DATABASE_URL`, or one started for this process."""
    global _url
    env = os.environ.get("DATABASE_URL")
    if env:
        return with_psycopg(env)
    with _lock:
        if _url is None:
            _url = _start()
        return _url


def _start() -> str:
    problems: list[str] = []
    for name, starter in (("pgserver wheel", _start_pgserver), ("PATH binaries", _start_path)):
        try:
            url, stop = starter()
        except Exception as exc:
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        atexit.register(stop)
        return url
    raise RuntimeError("could not start PostgreSQL for the tests; " + " | ".join(problems))


def _scratch_dir() -> Path:
    # Directly under /tmp and world-traversable: the unprivileged server user must reach
    # it, and Unix socket paths must stay short (about 100 bytes).
    path = Path(tempfile.mkdtemp(prefix="conveyor-pg-", dir="/tmp"))
    path.chmod(0o755)
    return path


def _start_pgserver() -> tuple[str, Callable[[], None]]:
    with warnings.catch_warnings():
        # pgserver asks platformdirs for a runtime dir at import; without XDG_RUNTIME_DIR
        # (CI, containers) it falls back to /tmp and says so on every test run.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        from pgserver.postgres_server import get_server

    scratch = _scratch_dir()
    try:
        server: Any = get_server(scratch / "data", cleanup_mode="delete")
        uri = str(server.get_uri())
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise

    def stop() -> None:
        try:
            server.cleanup()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    return with_psycopg(uri), stop


def _start_path() -> tuple[str, Callable[[], None]]:
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is None or pg_ctl is None:
        raise FileNotFoundError("initdb and pg_ctl are not on PATH")
    scratch = _scratch_dir()
    data = scratch / "data"
    as_user: dict[str, Any] = {}
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(scratch, nobody.pw_uid, nobody.pw_gid)
        as_user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}

    def run(*args: str) -> None:
        subprocess.run(args, check=True, capture_output=True, timeout=60, **as_user)

    try:
        run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = f"-h '' -k {scratch} -c fsync=off"
        run(pg_ctl, "-D", str(data), "-w", "-l", str(scratch / "log"), "-o", options, "start")
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise

    def stop() -> None:
        try:
            run(pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    return f"postgresql+psycopg://postgres@/postgres?host={scratch}", stop


def fresh_database(url: str | None = None, prefix: str = "conveyor_test") -> str:
    """Create an empty database on the server of `url` (default `postgres_url()`) and
    return its URL. Drop it with `drop_database` when done."""
    base = make_url(url or postgres_url())
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    engine = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    """Drop the database `url` names, disconnecting anyone still on it."""
    target = make_url(url)
    engine = create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{target.database}" WITH (FORCE)'))
    finally:
        engine.dispose()
