"""The CLI tests' project: a folder with a config and a handler module on SQLite or
Redis (`cli_project`), `cli(*args)` to call a command in this process with its output
captured, and `run_process` to run one as a user does, in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
import redis
from conveyor.shell.cli import main
from conveyor.testing.redis_server import redis_url

#: The Redis database these tests use (flushed at the start of each).
CLI_REDIS_DB = 12

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]

HANDLERS = """
import json, os, pathlib
OUT = pathlib.Path(os.environ["DEMO_OUT"])
def ship(args):
    with OUT.open("a") as f:
        f.write(json.dumps(args) + "\\n")
    return "ok"
def explode(args):
    from conveyor import Permanent
    raise Permanent("cannot ship to the moon")
HANDLERS = {"ship": ship, "explode": explode}
"""


@attrs.frozen
class Ran:
    """What one command did: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(params=["sqlite", "redis"])
def cli_project(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Path:
    """A project folder with a config and a handler module, the current directory
    while the test runs, on a migrated, empty database."""
    (tmp_path / "cli_handlers.py").write_text(HANDLERS)
    if request.param == "sqlite":
        backend = f'provider = "db"\nurl = "sqlite:///{tmp_path / "jobs.db"}"\n'
    else:
        url = redis_url(db=CLI_REDIS_DB)
        redis.Redis.from_url(url).flushdb()
        backend = f'provider = "redis"\nredis = {{ url = "{url}" }}\n'
    (tmp_path / "conveyor.toml").write_text(
        backend
        + 'handlers = ["cli_handlers:HANDLERS"]\nentry_points = false\n'
        + textwrap.dedent("""
            [workers]
            count = 2
            queues = ["default"]
            poll_interval_ms = 20
            promote_interval_ms = 50
        """)
    )
    # What a user's shell gives a command run in the project folder.
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cli_handlers", raising=False)
    monkeypatch.setenv("DEMO_OUT", str(tmp_path / "out.jsonl"))
    monkeypatch.delenv("CONVEYOR_URL", raising=False)
    monkeypatch.setattr(sys, "argv", ["conveyor"])
    assert main(["migrate"]) == 0  # the database exists, as after a deploy: status reads it
    return tmp_path


def call_main(capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    """`conveyor *args` in the current directory, called in this process: its exit
    code (argparse's refusals too, as a process would end) and only its output."""
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    return Ran(code, *capsys.readouterr())


@pytest.fixture
def cli(cli_project: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """`cli(*args)`: `conveyor *args` in the project folder, called in this process."""

    def call(*args: str, check: bool = True) -> Ran:
        result = call_main(capsys, *args)
        if check:
            assert result.returncode == 0, result.stderr
        return result

    return call


def process_env(project: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(project) + os.pathsep + env.get("PYTHONPATH", "")
    env["DEMO_OUT"] = str(project / "out.jsonl")
    env.pop("CONVEYOR_URL", None)
    return env


def run_process(project: Path, *args: str, check: bool = True) -> Ran:
    """`conveyor *args` as a user runs it: a process of its own, in the project folder."""
    result = subprocess.run(
        [*CONVEYOR, *args],
        cwd=project,
        env=process_env(project),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return Ran(result.returncode, result.stdout, result.stderr)
