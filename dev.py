#!/usr/bin/env python3
"""Set up and run Conveyor's development tasks with nothing but Python 3.11+ and pip.

    python3 dev.py demo    # the demo on the embedded SQLite default
    python3 dev.py test    # lint, import contract, types, then the whole test suite
    python3 dev.py test --fast  # the same checks, then only the tests needing no
                                # server and no subprocess (docs/testing.md)
    python3 dev.py bench   # the benchmarks (see docs/performance.md)
    python3 dev.py docs    # the documentation site, API reference included, into site/

Creates `.venv` and installs into it what the task needs the first time, and again
whenever pyproject.toml changes; otherwise it reuses what is there. The demo needs
only the project itself (no extras); the tests add the dev extras to the same venv.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if sys.platform == "win32" else "bin")


def run(*cmd: str | Path, cwd: Path = ROOT) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    result = subprocess.run([str(c) for c in cmd], cwd=cwd)
    if result.returncode != 0:
        sys.exit(result.returncode)


def run_quietly(what: str, *cmd: str | Path) -> None:
    """Run an install step, saying only `what` it does: pip's and the build's own
    chatter (progress, notices about the local index, build warnings) is kept back
    and shown only when the step fails, with the command that failed."""
    print(f"+ {what}", flush=True)
    result = subprocess.run(
        [str(c) for c in cmd], cwd=ROOT, capture_output=True, text=True, errors="replace"
    )
    if result.returncode != 0:
        print("+", " ".join(str(c) for c in cmd), flush=True)
        print(result.stdout + result.stderr, end="", flush=True)
        sys.exit(result.returncode)


def _stamp(extras: str) -> tuple[Path, str]:
    """Where an install with `extras` is recorded, and what it records: one stamp per
    set of extras, so the demo's install and the tests' do not undo each other."""
    name = ".conveyor-installed-" + (extras.replace(",", "-") or "base")
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    return VENV / name, want


def _installed(extras: str) -> bool:
    stamp, want = _stamp(extras)
    return stamp.exists() and stamp.read_text() == want


def ensure_env(extras: str = "dev") -> None:
    if sys.version_info < (3, 11):
        sys.exit("Conveyor needs Python 3.11 or newer")
    if _installed(extras):
        return
    if not (BIN / "python").exists():
        print("+ creating .venv", flush=True)
        venv.create(VENV, with_pip=True)
        pip = (BIN / "python", "-m", "pip", "install", "-q", "-U", "pip")
        run_quietly("upgrading pip in .venv", *pip)
    # pip only adds: installing the bare project over the dev extras removes none of them.
    target = f".[{extras}]" if extras else "."
    run_quietly(
        f"installing {target} into .venv (first run only; it takes a minute)",
        BIN / "python",
        "-m",
        "pip",
        "install",
        "-q",
        "-e",
        target,
    )
    stamp, want = _stamp(extras)
    stamp.write_text(want)


#: The tests `test --fast` runs: those marked neither `server` nor `subprocess` (the
#: markers are set at collection by tests/tiers.py).
FAST = "not server and not subprocess"


#: How pytest spreads the tests (pytest-xdist): one process per core, each taking the
#: next test as it frees up, so the long fault and process tests overlap with the rest.
#: `-n 0` (or any `-n`/`-p no:xdist` of your own) overrides it. Each process starts
#: its own servers; a Redis named by REDIS_URL is one server whose test databases the
#: processes would flush under each other, so with it set the tests run in one process.
PARALLEL = ("-n", "auto", "--dist", "worksteal")


def _parallel(args: list[str]) -> tuple[str, ...]:
    own = any(a.startswith(("-n", "--numprocesses", "--dist")) or a == "no:xdist" for a in args)
    return () if own or os.environ.get("REDIS_URL") else PARALLEL


def test(args: list[str]) -> None:
    fast = "--fast" in args
    args = [a for a in args if a != "--fast"]
    ensure_env()
    run(BIN / "ruff", "check", "src", "tests", "benchmarks")
    run(BIN / "lint-imports")
    run(BIN / "mypy", "--strict", "src")
    run(BIN / "python", "-m", "pytest", *_parallel(args), *(["-m", FAST] if fast else []), *args)


def demo(args: list[str]) -> None:
    # Any install that holds the project will do; a fresh clone gets the bare project.
    if not any(_installed(extras) for extras in ("dev", "dev,bench")):
        ensure_env("")
    # From the caller's folder: the commands it prints are to run from there.
    run(BIN / "conveyor", "demo", *args, cwd=Path.cwd())


def docs(args: list[str]) -> None:
    """Build the documentation site, with the API reference from docstrings, into site/."""
    ensure_env()
    run(BIN / "python", "-m", "mkdocs", "build", "--strict", "-d", ROOT / "site", *args)


def bench(args: list[str]) -> None:
    ensure_env("dev,bench")
    run(BIN / "python", "-m", "benchmarks.run", *args)


TASKS = {"test": test, "demo": demo, "docs": docs, "bench": bench}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in TASKS:
        sys.exit(f"usage: python3 dev.py {{{'|'.join(TASKS)}}} [args...]")
    TASKS[sys.argv[1]](sys.argv[2:])
