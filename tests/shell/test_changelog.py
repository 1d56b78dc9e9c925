"""CHANGELOG.md and the version move together: Keep a Changelog form, an Unreleased
section on top, the newest release is the version the package and `conveyor
--version` report, every breaking entry carries its migration, and the README links
it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import conveyor

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
RELEASE = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})$")


def _headings() -> list[str]:
    return [line for line in CHANGELOG.read_text().splitlines() if line.startswith("## ")]


def _releases() -> list[tuple[int, int, int]]:
    found = []
    for line in _headings()[1:]:
        match = RELEASE.match(line)
        assert match is not None, f"not a release heading: {line!r}"
        found.append((int(match[1]), int(match[2]), int(match[3])))
    return found


def _entries() -> list[str]:
    """Each `- ` entry of the file, its continuation lines joined."""
    entries: list[str] = []
    for line in CHANGELOG.read_text().splitlines():
        if line.startswith("- "):
            entries.append(line[2:])
        elif line.startswith("  ") and entries:
            entries[-1] += " " + line.strip()
    return entries


def test_the_changelog_opens_with_an_unreleased_section() -> None:
    assert CHANGELOG.read_text().startswith("# Changelog\n")
    assert _headings()[0] == "## [Unreleased]"


def test_releases_run_newest_first_with_no_gap_in_order() -> None:
    releases = _releases()
    assert releases, "at least one release"
    assert releases == sorted(releases, reverse=True)
    assert len(set(releases)) == len(releases)


def test_only_keep_a_changelog_section_names_are_used() -> None:
    used = {line[4:] for line in CHANGELOG.read_text().splitlines() if line.startswith("### ")}
    assert used <= SECTIONS, used - SECTIONS


def test_the_newest_release_is_the_version_of_the_package_and_of_pyproject() -> None:
    newest = ".".join(map(str, _releases()[0]))
    assert conveyor.__version__ == newest
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == newest


def test_conveyor_version_prints_the_newest_release() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "conveyor.shell.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"conveyor {'.'.join(map(str, _releases()[0]))}"


def test_every_breaking_entry_says_how_to_migrate() -> None:
    breaking = [entry for entry in _entries() if entry.startswith("**Breaking")]
    assert breaking, "the history has breaking changes"
    missing = [entry[:80] for entry in breaking if "Migration:" not in entry]
    assert missing == []


def test_the_runtime_get_change_names_its_migration() -> None:
    (entry,) = [e for e in _entries() if "`Runtime.get(id)` returns a `JobView`" in e]
    assert "Migration: `rt.get(id).job`" in entry


def test_a_breaking_change_moves_the_minor_number_before_1_0() -> None:
    text = CHANGELOG.read_text()
    for newer, older in zip(_releases(), _releases()[1:], strict=False):
        if newer[0] == 0 and newer[:2] == older[:2]:
            section = text.split(f"## [{'.'.join(map(str, newer))}]")[1].split("\n## ")[0]
            assert "**Breaking" not in section, f"{newer} breaks but only moves the patch"


def test_the_readme_links_the_changelog() -> None:
    assert "(CHANGELOG.md)" in (ROOT / "README.md").read_text()
