"""Every install line the README lists, as a new user runs it: a wheel built from
this tree is installed with that line alone into a fresh virtualenv, and the
commands an operator starts with run there against the real server the line is
for (SQLite for the base install, PostgreSQL for `[postgres]` and `[asyncio]`,
Redis for `[redis]`).

The dev extra installs every optional package at once, so the rest of the suite
cannot see an install that lacks one (the `[postgres]` line once failed every
command for want of greenlet). The wheel is built once per session; pip's own
cache serves the dependencies after the first run. Marked `install`, so
`pytest -m install` runs these alone and `-m "not install"` leaves them out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.install, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DIST = PYPROJECT["project"]["name"]


def readme_install_lines() -> list[str]:
    """The requirement of each `pip install` line in the README's Install section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Install", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    found = re.findall(r"^pip install (\S+)", block, re.M)
    return [line.strip("\"'") for line in found]


def extra_of(requirement: str) -> str | None:
    match = re.fullmatch(rf"{re.escape(DIST)}(?:\[(\w+)\])?", requirement)
    assert match is not None, f"not an install line of {DIST}: {requirement}"
    return match.group(1)


LINES = readme_install_lines()

#: The backend each line is for: what its smoke check runs against.
SERVER = {
    None: "sqlite",
    "postgres": "postgresql",
    "redis": "redis",
    "asyncio": "postgresql",
    "metrics": "sqlite",
    "tracing": "sqlite",
    "dashboard": "sqlite",
    "contract": "sqlite",
}

HANDLERS = '''
import conveyor

tasks = conveyor.Tasks()


@tasks.task(name="smoke.ok")
def ok(args):
    return {"n": args["n"]}


@tasks.task(name="smoke.boom", max_retries=0)
def boom(args):
    raise conveyor.Permanent("boom on purpose")
'''

#: `conveyor.build()` in the new install: enqueue, drain, status, the dead letter.
BUILD = """
import conveyor, smokejobs
runtime = conveyor.build("conveyor.toml")  # its handlers: the config's smokejobs
smokejobs.ok.enqueue({"n": 2})
dead = smokejobs.boom.enqueue({})
stats = runtime.drain()
assert stats.completed == 1, stats
assert dead.id in {job.id for job in runtime.list_dead()}
assert runtime.status().queues
runtime.close()
print("built")
"""

#: `aenqueue` through the asyncio driver the `[asyncio]` line brings.
AENQUEUE = """
import asyncio, conveyor
runtime = conveyor.build("conveyor.toml")
async def main():
    job = await runtime.aenqueue("smoke.ok", {"n": 3})
    await runtime.aclose()
    return job
job = asyncio.run(main())
print(runtime.async_writers.driver)
assert runtime.drain().completed == 1
runtime.close()
"""


#: The adapter contract the `[contract]` line brings, run on the memory backend.
CONTRACT = """
from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.testing.contract import CASES, Subject, check, state_machine

def subject():
    store = MemoryJobStore()
    return Subject("memory", MemoryJobQueue(store), store)

check(subject, cases=["fifo_within_a_priority", "ack_only_with_the_live_token"]).assert_ok()
assert state_machine(subject).TestCase
print(len(CASES), "cases")
"""


def test_the_readme_lists_the_base_install_and_only_real_extras() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert DIST in LINES
    for line in LINES:
        extra = extra_of(line)
        assert extra is None or extra in extras, line
        assert extra in SERVER, f"no smoke check for {line}: add one to SERVER"


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of this tree, built once, from a copy (the build writes beside its source)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), "."]
    built = subprocess.run(command, cwd=source, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = out.glob("*.whl")
    return found


def clean_env() -> dict[str, str]:
    """This process's environment without its virtualenv, config or test settings."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "DATABASE_URL", "REDIS_URL")
    return {
        key: value
        for key, value in os.environ.items()
        if key not in drop and not key.startswith("CONVEYOR_")
    }


class Venv:
    """A fresh virtualenv holding one install line, with a working folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "venv" / "bin"
        self.work = root / "work"
        self.work.mkdir()
        self.env = clean_env()

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        program = args[0] if "/" in args[0] else str(self.bin / args[0])
        return subprocess.run(
            [program, *args[1:]],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args: str, timeout: float = 120) -> str:
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stderr}"
        return done.stdout

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.bin / args[0]), *args[1:]],
            cwd=self.work,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )


def install(tmp_path: Path, wheel: Path, extra: str | None) -> Venv:
    venv = Venv(tmp_path)
    made = subprocess.run(
        [sys.executable, "-m", "venv", str(tmp_path / "venv")], capture_output=True, timeout=120
    )
    assert made.returncode == 0, made.stderr
    requirement = f"{wheel}[{extra}]" if extra else str(wheel)
    venv.ok("pip", "install", "-q", "--disable-pip-version-check", requirement, timeout=500)
    return venv


@pytest.fixture
def server_url(request: pytest.FixtureRequest) -> Iterator[Callable[[str], str]]:
    """The URL of a real, empty backend of the kind asked for."""
    cleanups: list[Callable[[], None]] = []

    def make(kind: str) -> str:
        if kind == "postgresql":
            from conveyor.testing.postgres_server import drop_database, fresh_database

            url = fresh_database(prefix="conveyor_install")
            cleanups.append(lambda: drop_database(url))
            return url
        if kind == "redis":
            from conveyor.testing.redis_server import RedisServer

            server = RedisServer().start()
            cleanups.append(server.cleanup)
            return server.url
        raise AssertionError(kind)

    yield make
    for cleanup in cleanups:
        cleanup()


def write_project(venv: Venv, kind: str, url: str | None) -> None:
    if kind == "sqlite":
        backend = 'provider = "db"\nurl = "sqlite:///jobs.db"\n'
    elif kind == "postgresql":
        backend = f'provider = "db"\nurl = "{url}"\n'
    else:
        backend = f'provider = "redis"\nredis = {{ url = "{url}" }}\n'
    (venv.work / "conveyor.toml").write_text(
        f'{backend}handlers = ["smokejobs:tasks"]\n'
        'workers = { queues = ["default"], poll_interval_ms = 50 }\n\n'
        '[[cron]]\nname = "nightly"\nschedule = "30 2 * * *"\njob_type = "smoke.ok"\n'
        "args = { n = 0 }\n"
    )
    (venv.work / "smokejobs.py").write_text(HANDLERS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def state_of(venv: Venv, job_id: str) -> str:
    shown = venv.ok("conveyor", "job", "show", job_id, "--json")
    state: str = json.loads(shown)["state"]
    return state


def wait_until(check: Callable[[], bool], what: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not check():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            output = process.stdout.read() if process.stdout else ""
            pytest.fail(f"{what} did not happen:\n{output}")
        time.sleep(0.2)


def stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        body: bytes = answer.read()
        return body.decode()


def run_worker_until_done(venv: Venv, ok_id: str, dead_id: str, *extra: str) -> None:
    """`conveyor worker` until both jobs have finished, then SIGTERM; `extra` flags go
    to the worker (the metrics line checks its endpoint meanwhile)."""
    worker = venv.start("conveyor", "worker", *extra)
    try:
        wait_until(
            lambda: (state_of(venv, ok_id), state_of(venv, dead_id)) == ("completed", "failed"),
            "the worker finishing both jobs",
            worker,
        )
        if "--metrics-port" in extra:
            port = extra[extra.index("--metrics-port") + 1]
            assert "conveyor_" in fetch(f"http://127.0.0.1:{port}/metrics")
    finally:
        stop(worker)


def check_dashboard(venv: Venv) -> None:
    port = free_port()
    served = venv.start("conveyor", "dashboard", "--port", str(port))
    try:

        def healthy() -> bool:
            try:
                return '"ok"' in fetch(f"http://127.0.0.1:{port}/healthz")
            except OSError:
                return False

        wait_until(healthy, "the dashboard answering /healthz", served)
        assert "Overview" in fetch(f"http://127.0.0.1:{port}/")
    finally:
        stop(served)


@pytest.mark.parametrize("line", LINES)
def test_each_readme_install_line_runs_its_backend(
    line: str, wheel: Path, tmp_path: Path, server_url: Callable[[str], str]
) -> None:
    extra = extra_of(line)
    kind = SERVER[extra]
    venv = install(tmp_path, wheel, extra)
    write_project(venv, kind, None if kind == "sqlite" else server_url(kind))
    if kind == "postgresql":
        assert "migrated" in venv.ok("conveyor", "migrate")
    ok_id = venv.ok("conveyor", "enqueue", "smoke.ok", '{"n": 1}').strip().split()[-1]
    dead_id = venv.ok("conveyor", "enqueue", "smoke.boom").strip().split()[-1]
    assert "default" in venv.ok("conveyor", "status")
    worker_flags: tuple[str, ...] = ()
    if extra == "metrics":
        worker_flags = ("--metrics-port", str(free_port()), "--metrics-addr", "127.0.0.1")
    if extra == "tracing":
        worker_flags = ("--tracing",)
    run_worker_until_done(venv, ok_id, dead_id, *worker_flags)
    assert dead_id in venv.ok("conveyor", "dead", "list")
    assert "nightly" in venv.ok("conveyor", "cron", "list")
    assert "built" in venv.ok(str(venv.bin / "python"), "-c", BUILD)
    if extra == "asyncio":
        assert venv.ok(str(venv.bin / "python"), "-c", AENQUEUE).strip() == "postgresql+asyncpg"
    if extra == "dashboard":
        check_dashboard(venv)
    if extra == "contract":
        assert "cases" in venv.ok(str(venv.bin / "python"), "-c", CONTRACT)
