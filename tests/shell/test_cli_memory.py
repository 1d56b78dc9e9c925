"""The memory provider keeps jobs in one process, so the `conveyor` commands that store
or read jobs refuse it, saying why and which providers to use; in-process use
(`build`, `drain`) and the demo keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import conveyor
import pytest
from conveyor.shell.cli import main
from test_forced_stop import kill_tree

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]
JOB = "6f1c1b8e-2f7d-4a63-9a56-0d1f3c6c9b11"

COMMANDS = [
    ("enqueue", "x", "{}"),
    ("worker",),
    ("worker", "--processes", "2"),
    ("status",),
    ("jobs", "list"),
    ("job", "show", JOB),
    ("job", "cancel", JOB),
    ("jobs", "cancel", "--queue", "default"),
    ("dead", "list"),
    ("dead", "retry", JOB),
    ("dead", "purge", "--all"),
    ("prune",),
    ("cron", "list"),
]


#: The commands also run end to end, each in a process of its own.
IN_A_PROCESS = [("enqueue", "x", "{}"), ("worker", "--processes", "2")]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "conveyor.toml").write_text('provider = "memory"\n')
    monkeypatch.chdir(tmp_path)
    for name in os.environ:
        if name.startswith("CONVEYOR_"):
            monkeypatch.delenv(name)
    return tmp_path


def assert_refused(code: object, stdout: str, stderr: str) -> None:
    assert code == 2, stdout + stderr
    assert stdout == "", "no job id, no table: nothing happened"
    (line,) = stderr.strip().splitlines()
    assert line.startswith("conveyor: invalid input: provider: 'memory'"), line
    assert "one process" in line and "'db'" in line and "'redis'" in line


# A worker that started anyway would run until the timeout stops it.
@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_a_command_that_stores_or_reads_jobs_refuses_the_memory_provider(
    project: Path, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code: object = main(list(argv))
    except SystemExit as exit:
        code = exit.code
    assert_refused(code, *capsys.readouterr())


@pytest.mark.parametrize("argv", IN_A_PROCESS, ids=[" ".join(c) for c in IN_A_PROCESS])
def test_run_as_its_own_process_a_command_refuses_the_memory_provider(
    project: Path, argv: tuple[str, ...]
) -> None:
    process = subprocess.Popen(
        [*CONVEYOR, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        kill_tree(process.pid)  # a worker (and its copies) running on the memory provider
        process.communicate()
        raise AssertionError(f"`conveyor {' '.join(argv)}` ran on the memory provider") from None
    assert_refused(process.returncode, stdout, stderr)


def test_the_memory_provider_in_one_process_is_unchanged() -> None:
    done: list[int] = []
    rt = conveyor.build({"provider": "memory"}, handlers={"x": lambda args: done.append(1)})
    rt.enqueue("x", {})
    rt.drain()
    assert done == [1]
