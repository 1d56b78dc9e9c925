"""Every ```python block in README.md and docs/*.md runs as written, or says why not.

A block runs as a reader would run it: saved as `example.py` in a fresh directory
and run there with `python example.py` (so it is `__main__`, as a script is), with
no `CONVEYOR_*` environment. Nothing is added to it: a name it uses and does not
define makes it fail.

A block whose first line is a comment naming a file (`# myapp/jobs.py`,
`# conveyor.toml`) is that file: it is written to that path and, for Python,
imported as its module; the blocks after it on the same page run beside it, as a
reader following the page would have them.

A block that uses a package the base install (`pip install conveyor-jobs`) does
not bring says so in a `# needs: ...` comment naming the extra or the package
(`# needs: pip install 'conveyor-jobs[metrics]'`). The packages a block imported
are read from the interpreter that ran it, and each is checked against that line.

A block that cannot run here says so with a comment right before it:

    <!-- not run: needs a Redis server at localhost:6379 -->

A block that neither runs nor carries that comment fails its test.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>[^>]*?)\s*-->\Z")
#: A first line such as `# myapp/jobs.py` or `# conveyor.toml`: the block is that file.
FILE_LINE = re.compile(r"\A#\s*(?P<path>[\w./-]+\.(?:py|toml))\s*\n")
NEEDS = re.compile(r"^\s*#\s*needs:\s*(?P<what>.+)$", re.M)

DIST = "conveyor-jobs"

#: Packages a library imports only when they happen to be installed (the
#: OpenTelemetry SDK reads process figures through psutil if it is there): a reader
#: without them runs the block all the same.
OPPORTUNISTIC = {"psutil"}


@dataclass(frozen=True)
class Snippet:
    page: str
    ordinal: int  # 1-based, among the page's python blocks
    line: int
    code: str
    not_run: str | None  # the reason given, when marked as not runnable
    #: The files the page's earlier blocks are (path, text), written beside this one.
    files: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        return f"{self.page}#{self.ordinal}"

    @property
    def path(self) -> str | None:
        """The file this block is, when its first line names one."""
        match = FILE_LINE.match(self.code)
        return match.group("path") if match else None

    @property
    def needs(self) -> str:
        """What the block's `# needs:` lines say it needs (empty when nothing)."""
        return " ".join(m.group("what") for m in NEEDS.finditer(self.code))


def python_snippets(page: str, text: str) -> list[Snippet]:
    found: list[Snippet] = []
    files: list[tuple[str, str]] = []
    for match in FENCE.finditer(text):
        language, code = match.group(1), match.group(2)
        named = FILE_LINE.match(code)
        if language == "python":
            marker = NOT_RUN.search(text[: match.start()].rstrip())
            found.append(
                Snippet(
                    page=page,
                    ordinal=len(found) + 1,
                    line=text.count("\n", 0, match.start()) + 2,
                    code=code,
                    not_run=marker.group("reason") if marker else None,
                    files=tuple(files),
                )
            )
        if named and language in ("python", "toml"):
            files.append((named.group("path"), code))
    return found


def all_snippets() -> list[Snippet]:
    return [
        snippet
        for path in PAGES
        for snippet in python_snippets(
            path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")
        )
    ]


# ---- which packages a block may use without saying so ----------------------------


def _requirement_names(dist: str, extra: str | None = None) -> set[str]:
    """The distributions `dist` requires (with `extra`, those the extra adds)."""
    names = set()
    for requirement in importlib.metadata.requires(dist) or []:
        name, _, marker = requirement.partition(";")
        wanted = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if (wanted.group(1) if wanted else None) != extra:
            continue
        names.add(_normal(re.match(r"[A-Za-z0-9._-]+", name.strip()).group(0)))  # type: ignore[union-attr]
    return names


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def closure(dist: str, extra: str | None = None) -> frozenset[str]:
    """`dist` (or only what its `extra` adds) and everything those require in turn."""
    todo = list(_requirement_names(dist, extra))
    seen: set[str] = set() if extra else {_normal(dist)}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(_requirement_names(name))
        except importlib.metadata.PackageNotFoundError:
            pass  # a requirement for another platform or Python
    return frozenset(seen)


def extras() -> list[str]:
    return importlib.metadata.metadata(DIST).get_all("Provides-Extra") or []


def unsaid_packages(snippet: Snippet, modules: list[str]) -> list[str]:
    """The distributions outside the base install that the block imported and its
    `# needs:` line does not name: by the distribution's name or a module it holds
    (and so what it requires), or by an extra that brings it."""
    owners = importlib.metadata.packages_distributions()
    said = snippet.needs.lower()
    words = {_normal(word) for word in re.findall(r"[\w.-]+", said)}
    allowed = set(closure(DIST))
    for group in re.findall(r"conveyor-jobs\[([\w,-]+)\]", said):
        for extra in group.split(","):
            allowed |= closure(DIST, extra.strip())
    for module, dists in owners.items():
        if _normal(module) in words:
            for dist in dists:
                allowed |= closure(dist)
    for word in words:
        try:
            allowed |= closure(word)
        except importlib.metadata.PackageNotFoundError:
            pass  # a word of the sentence, not a package
    missing = {
        _normal(owner)
        for module in modules
        for owner in owners.get(module, [])
        if _normal(owner) not in allowed and _normal(owner) not in OPPORTUNISTIC
    }
    return sorted(missing)


# ---- running a block --------------------------------------------------------------

RUNNER = """\
import atexit, importlib, json, runpy, sys

BEFORE = set(sys.modules)  # what the interpreter loads before any block (site hooks)

def dump():
    with open("_modules.json", "w") as out:
        json.dump(sorted({name.partition(".")[0] for name in set(sys.modules) - BEFORE}), out)

atexit.register(dump)
target = sys.argv[1]
sys.argv = [target]
if target == "example.py":
    runpy.run_path(target, run_name="__main__")
else:
    importlib.import_module(target.removesuffix(".py").replace("/", "."))
"""


def run_snippet(snippet: Snippet, folder: Path) -> list[str]:
    """Run the block in `folder`; the top-level modules it imported."""
    for path, text in snippet.files:
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        for parent in target.relative_to(folder).parents:
            if path.endswith(".py") and str(parent) != ".":
                (folder / parent / "__init__.py").touch()
    own = snippet.path
    if own is not None and own.endswith(".py"):
        (folder / own).parent.mkdir(parents=True, exist_ok=True)
        (folder / own).write_text(snippet.code)
        for parent in Path(own).parents:
            if str(parent) != ".":
                (folder / parent / "__init__.py").touch()
        target = own
    else:
        (folder / "example.py").write_text(snippet.code)
        target = "example.py"
    (folder / "_runner.py").write_text(RUNNER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "_runner.py", target],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    where = f"{snippet.page}, the python block at line {snippet.line}"
    assert result.returncode == 0, f"{where} fails as written:\n{result.stderr[-3000:]}"
    modules: list[str] = json.loads((folder / "_modules.json").read_text())
    return modules


RUNNABLE = [s for s in all_snippets() if s.not_run is None]


@pytest.mark.parametrize("snippet", RUNNABLE, ids=[s.id for s in RUNNABLE])
def test_the_python_block_runs_as_written(snippet: Snippet, tmp_path: Path) -> None:
    modules = run_snippet(snippet, tmp_path)
    unsaid = unsaid_packages(snippet, modules)
    assert not unsaid, (
        f"{snippet.page}, the python block at line {snippet.line}, uses {', '.join(unsaid)}, "
        f"which the base install does not bring: say so in a `# needs: ...` line"
    )


@pytest.mark.parametrize(
    "snippet",
    [s for s in all_snippets() if s.not_run is not None],
    ids=[s.id for s in all_snippets() if s.not_run is not None],
)
def test_a_block_marked_not_run_says_why(snippet: Snippet) -> None:
    assert snippet.not_run


def test_a_python_block_without_a_marker_is_collected_to_run() -> None:
    page = "Text.\n\n```python\nraise SystemExit\n```\n"
    assert [s.not_run for s in python_snippets("x.md", page)] == [None]


def test_the_not_run_marker_must_come_right_before_the_block() -> None:
    page = (
        "<!-- not run: needs a PostgreSQL server -->\n\n```python\nconnect()\n```\n\n"
        "Some text.\n\n```python\nstill_run()\n```\n"
    )
    assert [s.not_run for s in python_snippets("x.md", page)] == [
        "needs a PostgreSQL server",
        None,
    ]


def test_a_block_that_leans_on_names_it_does_not_define_fails(tmp_path: Path) -> None:
    [snippet] = python_snippets("x.md", "```python\nruntime.drain()\n```\n")
    with pytest.raises(AssertionError, match="NameError: name 'runtime' is not defined"):
        run_snippet(snippet, tmp_path)


def test_a_task_without_a_name_in_a_script_fails_as_it_would_for_a_reader(
    tmp_path: Path,
) -> None:
    code = (
        "import conveyor\ntasks = conveyor.Tasks()\n"
        "@tasks.task\ndef send(args):\n    return None\n"
    )
    [snippet] = python_snippets("x.md", f"```python\n{code}```\n")
    with pytest.raises(AssertionError, match="ValidationError"):
        run_snippet(snippet, tmp_path)


def test_a_file_block_is_written_for_the_blocks_after_it(tmp_path: Path) -> None:
    page = (
        "```python\n# shop/jobs.py\nHANDLERS = {'ship': lambda args: None}\n```\n\n"
        "```python\nfrom shop.jobs import HANDLERS\nassert 'ship' in HANDLERS\n```\n"
    )
    first, second = python_snippets("x.md", page)
    assert first.path == "shop/jobs.py" and second.files == ((first.path, first.code),)
    run_snippet(second, tmp_path)


def test_a_package_outside_the_base_install_must_be_named() -> None:
    plain = Snippet("x.md", 1, 1, "import prometheus_client\n", None)
    assert unsaid_packages(plain, ["prometheus_client", "conveyor", "json"]) == [
        "prometheus-client"
    ]
    said = Snippet(
        "x.md", 1, 1, "# needs: pip install 'conveyor-jobs[metrics]'\nimport x\n", None
    )
    assert unsaid_packages(said, ["prometheus_client", "attr", "sqlalchemy"]) == []


def test_the_readme_install_list_names_every_extra_a_user_installs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r'pip install "conveyor-jobs\[(\w+)\]"', readme))
    wanted = {e for e in extras() if e not in ("dev", "bench")}
    assert wanted <= listed, f"README.md's install list lacks {sorted(wanted - listed)}"
