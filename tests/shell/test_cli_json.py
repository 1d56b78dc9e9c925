"""Every `--json` output of the CLI is JSON: the test walks the parser for each command
that offers `--json` (and `dead show`, which always prints JSON), runs it as a user
does on a SQLite file holding jobs in every state, and parses what it prints. A new
command with `--json` fails here until it is given arguments to run with."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor.shell.cli.command import parser

pytestmark = pytest.mark.timeout(240)

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]
#: Commands that print JSON without being asked.
ALWAYS_JSON = {("dead", "show")}
RESULT = {"rows": [1, {"a": None, "b": [True, 2.5]}], "name": "é"}


def boom(args: Any) -> None:
    from conveyor import Permanent

    raise Permanent("no")


def _subparsers(p: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def json_commands(
    p: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """The command paths whose parser has `--json`, or that always print JSON."""
    children = list(_subparsers(p))
    for name, child in children:
        yield from json_commands(child, (*path, name))
    if not children:
        flags = {flag for action in p._actions for flag in action.option_strings}
        if "--json" in flags or path in ALWAYS_JSON:
            yield path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("cli-json")
    url = f"sqlite:///{folder / 'jobs.db'}"
    (folder / "conveyor.toml").write_text(
        f'provider = "db"\nurl = "{url}"\nentry_points = false\n'
        '[workers]\nqueues = ["default"]\n'
        "[limits.default]\nfair = true\n"
        '[[cron]]\nname = "nightly"\nschedule = "0 3 * * *"\njob_type = "report"\n'
    )
    runtime = conveyor.build(
        {"provider": "db", "url": url, "entry_points": False},
        handlers={"done": lambda args: RESULT, "boom": boom},
        env={},
    )
    try:
        done = runtime.enqueue("done", {"secret": "s"}).id
        dead = runtime.enqueue("boom", {}).id
        runtime.drain(timeout_s=30)
        runtime.enqueue("later", {}, delay=3600)
        runtime.enqueue("waiting", {"n": 1})
        flow = conveyor.Workflow()
        flow.add("merge", after=[flow.add("done", {"n": 2})], name="merge")
        workflow = runtime.enqueue(flow)
    finally:
        runtime.close()
    return {"folder": folder, "done": str(done), "dead": str(dead), "workflow": str(workflow)}


def _argv(path: tuple[str, ...], site: dict[str, Any]) -> list[list[str]]:
    """The ways each JSON command is run here."""
    known = {
        ("status",): [["--json"]],
        ("jobs", "list"): [["--json"]],
        ("job", "show"): [
            [site["done"], "--json"],
            [site["done"], "--json", "--show-result", "--show-args"],
            [site["dead"], "--json", "--show-result"],
        ],
        ("dead", "list"): [["--json"]],
        ("dead", "show"): [[site["dead"]], [site["dead"], "--show-args"]],
        ("cron", "list"): [["--json"]],
        ("workflow", "show"): [[site["workflow"], "--json"]],
        ("workflow", "cancel"): [[site["workflow"], "--json"]],
    }
    assert path in known, f"`conveyor {' '.join(path)}` prints JSON: give it arguments here"
    return [[*path, *extra] for extra in known[path]]


def _run(folder: Path, argv: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    done = subprocess.run(
        [*CONVEYOR, *argv], cwd=folder, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"conveyor {' '.join(argv)}: {done.stderr}"
    return done.stdout


COMMANDS = sorted(json_commands(parser()))


def test_the_walk_finds_the_json_commands() -> None:
    assert {("status",), ("job", "show"), ("jobs", "list"), ("dead", "list")} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_json_output_parses_as_json(path: tuple[str, ...], site: dict[str, Any]) -> None:
    for argv in _argv(path, site):
        out = _run(site["folder"], argv)
        json.loads(out)  # the whole of stdout is one JSON document


def test_job_show_prints_the_result_as_a_json_value(site: dict[str, Any]) -> None:
    out = _run(site["folder"], ["job", "show", site["done"], "--json", "--show-result"])
    shown = json.loads(out)
    assert shown["result"] == RESULT, "a JSON value, not the text of a Python repr"
    assert "args" not in shown, "args only when asked"


def test_job_show_without_json_prints_the_result_as_json_text(site: dict[str, Any]) -> None:
    out = _run(site["folder"], ["job", "show", site["done"], "--show-result"])
    line = next(line for line in out.splitlines() if line.startswith("result: "))
    assert json.loads(line.removeprefix("result: ")) == RESULT
    # Readable text, as the progress line is: "é", not "\\u00e9".
    assert '"name": "é"' in line, line
