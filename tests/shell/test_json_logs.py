"""`--log-format json`: every line the worker writes on stderr is one JSON object, the
start banner, the metrics address, the stop notice and the Redis warnings included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor.testing.redis_server import RedisServer

pytestmark = pytest.mark.timeout(120)

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]


def parsed(stderr: str) -> list[dict[str, Any]]:
    entries = []
    for line in stderr.splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"a line on stderr is not JSON: {line!r}\n{stderr}") from None
    return entries


def test_every_stderr_line_of_a_json_worker_is_json(tmp_path: Path) -> None:
    # AOF off: the backend warns that a crash loses jobs, once, at start.
    redis = RedisServer(extra_args=["--appendonly", "no"]).start()
    try:
        (tmp_path / "json_jobs.py").write_text("HANDLERS = {'note': lambda args: args['n']}\n")
        (tmp_path / "conveyor.toml").write_text(
            f'provider = "redis"\nhandlers = ["json_jobs:HANDLERS"]\nentry_points = false\n'
            f'[redis]\nurl = "{redis.url}"\n'
            '[workers]\ncount = 1\nqueues = ["default"]\npoll_interval_ms = 20\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
        env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}"
        worker = subprocess.Popen(
            [*CONVEYOR, "--log-format", "json", "worker", "--metrics-port", "0"],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        runtime = conveyor.build(
            {"provider": "redis", "redis": {"url": redis.url}, "entry_points": False}, env={}
        )
        try:
            job = runtime.enqueue("note", {"n": 1})
            deadline = time.monotonic() + 30
            while (view := runtime.get(job.id)) is None or view.state.value != "completed":
                assert time.monotonic() < deadline, "the worker did not run the job"
                time.sleep(0.05)
        finally:
            runtime.close()
            worker.send_signal(signal.SIGTERM)
            _, stderr = worker.communicate(timeout=30)
    finally:
        redis.kill()
    assert worker.returncode == 0, stderr
    entries = parsed(stderr)
    messages = [e["message"] for e in entries]
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    assert any(m.startswith("conveyor worker ") and "provider=redis" in m for m in messages)
    assert any("metrics at http://" in m for m in messages), messages
    assert any("SIGTERM, stopping gracefully" in m for m in messages), messages
    assert any(m.startswith("redis server ") and "AOF" in m for m in messages), messages


def _refused_show(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`conveyor --log-format json job show not-a-uuid`: a command that fails on its
    input, with `env` over an environment free of CONVEYOR_ variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    (tmp_path / "conveyor.toml").write_text('provider = "memory"\n')
    return subprocess.run(
        [*CONVEYOR, "--log-format", "json", "job", "show", "not-a-uuid"],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_json_command_that_fails_says_so_in_json(tmp_path: Path) -> None:
    result = _refused_show(tmp_path)
    assert result.returncode == 2
    [entry] = parsed(result.stderr)
    assert entry["level"] == "ERROR" and entry["message"].startswith("conveyor: invalid input: ")


@pytest.mark.parametrize(
    "args",
    [
        ["--log-format", "json", "worker", "--processes", "two"],
        ["--log-format=json", "--log-level", "BOGUS", "status"],
        ["--log-format", "json", "no-such-command"],
    ],
)
def test_a_command_line_the_parser_refuses_is_told_in_json_too(
    tmp_path: Path, args: list[str]
) -> None:
    # argparse's own refusals came out as plain text, the one line of a failing command
    # that was not a JSON object.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    result = subprocess.run(
        [*CONVEYOR, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    [entry] = parsed(result.stderr)
    assert entry["level"] == "ERROR" and entry["logger"] == "conveyor.cli"
    assert entry["message"].startswith("conveyor: invalid input: argument ")



def test_a_copy_under_processes_names_itself_in_its_notices_too(tmp_path: Path) -> None:
    # The copies' banner and exit lines lacked the `process` their log lines carry.
    from conveyor.shell.cli.supervisor import COPY_REFUSED_EXIT, PROCESS_INDEX_ENV

    result = _refused_show(tmp_path, **{PROCESS_INDEX_ENV: "3"})
    assert result.returncode == COPY_REFUSED_EXIT
    [entry] = parsed(result.stderr)
    assert entry["process"] == "3" and entry["message"].startswith("conveyor: invalid input: ")
