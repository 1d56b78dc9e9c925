"""A configured handler module that cannot be used is told in one line naming the
config entry, whatever went wrong: a module missing, a module whose own code raised
while it was imported (where it raised, too), a mapping holding something that is no
handler. The worker refuses to start (exit 2); nothing is half-registered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor.core import ValidationError

BROKEN = 'import os\nraise RuntimeError("boom at import")\n'


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "broken_jobs.py").write_text(BROKEN)
    (tmp_path / "odd_jobs.py").write_text('HANDLERS = {"a": 5}\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("broken_jobs", "odd_jobs"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def _refusal(spec: str) -> str:
    with pytest.raises(ValidationError) as refused:
        conveyor.build({"provider": "memory", "handlers": [spec], "entry_points": False}, env={})
    return str(refused.value)


def test_a_module_that_raises_on_import_is_named_with_what_and_where(modules: Path) -> None:
    told = _refusal("broken_jobs:HANDLERS")
    assert told == (
        "handlers[0]: importing 'broken_jobs' raised RuntimeError: boom at import "
        f"(at {modules / 'broken_jobs.py'}:2)"
    )


def test_a_mapping_holding_no_handler_is_named_under_its_entry(modules: Path) -> None:
    assert _refusal("odd_jobs:HANDLERS") == "handlers[0]: handler for 'a' is not callable"


def test_the_worker_refuses_to_start_in_one_line(modules: Path) -> None:
    (modules / "conveyor.toml").write_text(
        f'url = "sqlite:///{modules / "jobs.db"}"\n'
        'handlers = ["broken_jobs:HANDLERS"]\nentry_points = false\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env["PYTHONPATH"] = str(modules) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "conveyor.shell.cli", "worker"],
        cwd=modules,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "handlers[0]: importing 'broken_jobs' raised RuntimeError: boom at import" in lines[0]


def _zero() -> None:
    return None


def _three(args: Any, b: Any, c: Any) -> None:
    return None


def _keyword_context(args: Any, *, ctx: Any) -> None:
    return None


@pytest.mark.parametrize("handler", [_zero, _three, _keyword_context])
def test_a_handler_that_cannot_take_the_args_is_refused_at_registration(handler: Any) -> None:
    with pytest.raises(ValidationError, match="must take the job's args"):
        conveyor.build({"provider": "memory"}, handlers={"h": handler}, env={})


def test_handlers_that_take_the_args_and_maybe_the_context_are_kept() -> None:
    def one(args: Any) -> int:
        return 1

    def two(args: Any, ctx: Any) -> int:
        return 2

    def defaults(args: Any, b: int = 1, c: int = 2) -> int:
        return 3

    def star(*args: Any) -> int:
        return 4

    handlers = {"one": one, "two": two, "defaults": defaults, "star": star, "len": len}
    rt = conveyor.build({"provider": "memory"}, handlers=handlers, env={})
    try:
        jobs = {name: rt.enqueue(name, {}) for name in handlers}
        rt.drain()
        got = {name: rt.result(job.id, timeout=5) for name, job in jobs.items()}
    finally:
        rt.close()
    assert got == {"one": 1, "two": 2, "defaults": 3, "star": 4, "len": 0}
