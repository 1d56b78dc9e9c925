"""The documentation site builds with `mkdocs build --strict`, and its API reference,
generated from docstrings, covers every public `Runtime` method and every name
`import conveyor` offers."""

from __future__ import annotations

import argparse
import inspect
import re
import subprocess
import sys
from pathlib import Path

import conveyor
import pytest
import yaml
from conveyor.core import JobStatus
from conveyor.shell.cli import command as cli
from conveyor.shell.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def public_methods(cls: type) -> list[str]:
    return sorted(
        name
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    )


def page_ids(html: str) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', html))


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [
            *(sys.executable, "-m", "mkdocs", "build", "--strict"),
            *("-f", str(ROOT / "mkdocs.yml"), "-d", str(site)),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
    )
    return result, site


@pytest.fixture(scope="module")
def api_ids(built: tuple[subprocess.CompletedProcess[str], Path]) -> set[str]:
    result, site = built
    assert result.returncode == 0, result.stdout + result.stderr
    return page_ids((site / "api" / "index.html").read_text(encoding="utf-8"))


def test_the_site_builds_with_no_warning_in_strict_mode(
    built: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, site = built
    assert result.returncode == 0, result.stdout + result.stderr
    assert (site / "api" / "index.html").exists()


def test_every_public_runtime_method_has_a_docstring() -> None:
    undocumented = [
        name for name in public_methods(Runtime) if not inspect.getdoc(getattr(Runtime, name))
    ]
    assert undocumented == []


def test_every_public_runtime_method_is_on_the_api_page(api_ids: set[str]) -> None:
    missing = [
        name
        for name in public_methods(Runtime)
        if f"conveyor.shell.runtime.Runtime.{name}" not in api_ids
    ]
    assert missing == []


def test_every_name_import_conveyor_offers_is_on_the_api_page(api_ids: set[str]) -> None:
    missing = []
    for name in conveyor.__all__:
        if name == "__version__":
            continue
        obj = getattr(conveyor, name)
        if f"{obj.__module__}.{obj.__qualname__}" not in api_ids:
            missing.append(f"{name} ({obj.__module__}.{obj.__qualname__})")
    assert missing == []


def test_the_site_navigation_lists_every_docs_page() -> None:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    listed = {page for entry in nav for page in entry.values()}
    assert listed == {p.name for p in DOCS.glob("*.md")}


def test_every_page_in_the_readme_documentation_list_is_in_the_site() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", readme))
    assert linked, "README.md links no docs page"
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    listed = {page for entry in nav for page in entry.values()}
    assert linked - listed == set()


# ---- one name per state, one unit per setting -------------------------------


def cli_options() -> list[tuple[str, argparse.Action]]:
    """Every option of every `conveyor` command, as (command path, action)."""
    found = []
    todo: list[tuple[str, argparse.ArgumentParser]] = [("conveyor", cli.parser())]
    while todo:
        path, parser = todo.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend((f"{path} {name}", sub) for name, sub in action.choices.items())
            elif action.option_strings:
                found.append((path, action))
    return found


def first_table_after(page: str, marker: str) -> list[list[str]]:
    """The body rows of the first Markdown table after `marker` in `page`, as cells."""
    text = (DOCS / page).read_text(encoding="utf-8")
    lines = text.split(marker, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_every_cli_flag_taking_seconds_is_in_the_units_table_with_its_unit() -> None:
    rows = {row[0]: row[1] for row in first_table_after("configuration.md", "**Units.**")}
    taking_seconds = [
        (path.removeprefix("conveyor ").split()[-1], action.option_strings[0])
        for path, action in cli_options()
        if "seconds" in (action.help or "")
    ]
    assert taking_seconds, "no CLI flag takes seconds"
    for command, flag in taking_seconds:
        row = next(
            (unit for name, unit in rows.items() if name.startswith(f"`{command} {flag}")), None
        )
        assert row is not None and "seconds" in row, f"{command} {flag}"


def test_no_config_key_is_given_in_seconds() -> None:
    for key, *_ in first_table_after("configuration.md", "## Keys"):
        assert not re.search(r"_s\b|_seconds\b", key), key


def states_in_table(page: str, heading: str) -> list[str]:
    return [row[0].strip("`") for row in first_table_after(page, heading)]


def test_the_core_and_operations_pages_name_exactly_the_job_states() -> None:
    states = [s.value for s in JobStatus]
    assert states_in_table("core.md", "## States") == states
    assert states_in_table("operations.md", "## States") == states


def test_the_cli_state_filter_names_exactly_the_job_states() -> None:
    (state,) = [
        a
        for path, a in cli_options()
        if path == "conveyor jobs list" and "--state" in a.option_strings
    ]
    named = re.findall(r"[a-z]+", (state.help or "").split("(")[0])
    assert named == [s.value for s in JobStatus]
