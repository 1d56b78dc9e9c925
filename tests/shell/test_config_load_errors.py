"""Every way of pointing at a config, and every bad value in it, ends the same way:
one `ValidationError` naming each problem and where it came from (a file, a
`CONVEYOR_*` variable, a flag), which the CLI prints as one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import conveyor
import pytest
from conveyor.core import ValidationError
from conveyor.shell.config import apply_env, find_file, load_config

CONVEYOR = [sys.executable, "-m", "conveyor.shell.cli"]
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_")}
    return {**clean, **extra}


def run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CONVEYOR, *args], cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=60
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command prints, after checking it printed only that."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


# --- CONVEYOR_CONFIG names a file that is not there ----------------------------------


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_a_conveyor_config_that_is_no_file_is_invalid_input_naming_the_variable(
    tmp_path: Path, kind: str
) -> None:
    if kind == "directory":
        (tmp_path / "nope.toml").mkdir()
    result = run(tmp_path, "status", CONVEYOR_CONFIG="nope.toml")
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert line.startswith("conveyor: invalid input: config: no such file: nope.toml"), line
    assert "CONVEYOR_CONFIG" in line


def test_a_conveyor_config_that_is_no_file_is_refused_as_config_is(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.toml")
    with pytest.raises(ValidationError) as from_argument:
        load_config(missing, env={})
    with pytest.raises(ValidationError) as from_env:
        load_config(env={"CONVEYOR_CONFIG": missing})
    assert from_env.value.fields == from_argument.value.fields == ("config",)
    assert f"no such file: {missing}" in from_env.value.errors[0].reason
    assert "CONVEYOR_CONFIG" in from_env.value.errors[0].reason


def test_build_with_a_missing_conveyor_config_raises_validation_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONVEYOR_CONFIG", "nope.toml")
    with pytest.raises(ValidationError) as refused:
        conveyor.build()
    assert refused.value.fields == ("config",)


# --- a broken pyproject.toml on the way up ---------------------------------------------


def test_a_broken_pyproject_found_on_the_way_up_is_invalid_input_naming_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "pyproject.toml").write_text("[project\n")
    result = run(tmp_path, "status")
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert line.startswith(
        f"conveyor: invalid input: {tmp_path / 'pyproject.toml'}: is not valid TOML"
    ), line


def test_find_file_names_a_broken_pyproject_in_a_folder_above(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project\n")
    (tmp_path / "app").mkdir()
    with pytest.raises(ValidationError) as refused:
        find_file(tmp_path / "app")
    assert refused.value.fields == (str(tmp_path / "pyproject.toml"),)
    assert refused.value.errors[0].reason.startswith("is not valid TOML")


def test_a_conveyor_toml_beside_a_broken_pyproject_is_still_the_config(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project\n")
    (tmp_path / "conveyor.toml").write_text("lease_ms = 5000\n")
    assert find_file(tmp_path) == tmp_path / "conveyor.toml"


# --- bad environment variables join the file's problems ---------------------------------


def test_every_bad_variable_is_named_at_once() -> None:
    with pytest.raises(ValidationError) as refused:
        apply_env({}, {"CONVEYOR_WORKERS": "abc", "CONVEYOR_LEASE_MS": "soon"})
    assert set(refused.value.errors) == {
        conveyor.core.FieldError("workers.count", "CONVEYOR_WORKERS='abc' is not an integer"),
        conveyor.core.FieldError("lease_ms", "CONVEYOR_LEASE_MS='soon' is not an integer"),
    }


def test_bad_variables_and_the_files_problems_are_reported_together(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[workers]\ncount = -1\nprefetch = 0\n")
    env = {"CONVEYOR_WORKERS": "abc", "CONVEYOR_MAX_RECLAIMS": "x", "CONVEYOR_LEASE_MS": "-5"}
    with pytest.raises(ValidationError) as refused:
        load_config(config, env=env)
    reasons = dict((e.field, e.reason) for e in refused.value.errors)
    # The file's `count = -1` is not reported: CONVEYOR_WORKERS replaces it, so fixing
    # the variable is all it takes (no problem shows up only after another is fixed).
    assert sorted(refused.value.fields) == [
        "lease_ms",
        "max_reclaims",
        "workers.count",
        "workers.prefetch",
    ]
    assert reasons["workers.count"] == "CONVEYOR_WORKERS='abc' is not an integer"
    assert reasons["max_reclaims"] == "CONVEYOR_MAX_RECLAIMS='x' is not an integer"
    assert "-5" in reasons["lease_ms"] and "0" in reasons["workers.prefetch"]


def test_a_value_out_of_range_from_a_variable_names_the_variable(tmp_path: Path) -> None:
    # "workers.count: must be >= 0, got -1" sent the reader to a file that says 2.
    config = tmp_path / "conveyor.toml"
    config.write_text("[workers]\ncount = 2\n")
    env = {"CONVEYOR_WORKERS": "-1", "CONVEYOR_PROVIDER": "mem"}
    with pytest.raises(ValidationError) as refused:
        load_config(config, env=env)
    reasons = dict((e.field, e.reason) for e in refused.value.errors)
    assert reasons["workers.count"].endswith(" (set by CONVEYOR_WORKERS)")
    assert reasons["provider"].endswith(" (set by CONVEYOR_PROVIDER)")
    config.write_text("[workers]\ncount = -1\n")
    with pytest.raises(ValidationError) as from_file:
        load_config(config, env={"CONVEYOR_LEASE_MS": "1000"})
    assert str(from_file.value) == "workers.count: must be >= 0, got -1"


def test_a_bad_variable_joins_the_problems_of_a_mapping_too() -> None:
    with pytest.raises(ValidationError) as refused:
        load_config({"workers": {"prefetch": 0}}, env={"CONVEYOR_POOL_SIZE": "big"})
    assert sorted(refused.value.fields) == ["pool_size", "workers.prefetch"]


def test_the_cli_reports_bad_variables_and_the_files_problems_on_one_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "bad.toml").write_text("[workers]\nprefetch = 0\n")
    result = run(
        tmp_path,
        "--config",
        "bad.toml",
        "status",
        CONVEYOR_WORKERS="abc",
        CONVEYOR_LEASE_MS="-5",
    )
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert line.startswith("conveyor: invalid input: "), line
    for problem in ("workers.count: CONVEYOR_WORKERS='abc'", "lease_ms: ", "workers.prefetch: "):
        assert problem in line, line


# --- --log-level ----------------------------------------------------------------------


def test_an_unknown_log_level_is_refused_listing_the_levels(tmp_path: Path) -> None:
    result = run(tmp_path, "--log-level", "ERRORR", "status")
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert line.startswith("conveyor: invalid input: argument --log-level"), line
    assert "ERRORR" in line
    for level in LEVELS:
        assert level in line, line


def test_a_log_level_is_read_in_any_case(tmp_path: Path) -> None:
    # `[redis]` under provider `db` is set in vain: one WARNING from the config.
    (tmp_path / "conveyor.toml").write_text('url = "sqlite:///jobs.db"\n[redis]\nprefix = "x"\n')
    shown = run(tmp_path, "--log-level", "warning", "enqueue", "x", "{}")
    hidden = run(tmp_path, "--log-level", "Error", "enqueue", "x", "{}")
    assert shown.returncode == hidden.returncode == 0, shown.stderr + hidden.stderr
    assert "WARNING conveyor.config: config key 'redis' is set but not used" in shown.stderr
    assert "is set but not used" not in hidden.stderr
