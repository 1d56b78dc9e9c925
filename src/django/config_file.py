"""The backend's Conveyor config as a TOML file, for the `conveyor` command line.

`manage.py conveyor` hands the command line a config file (as `--config`), so every
command, and every worker copy the supervisor starts, reads the same config the
backend enqueues with. The file lives in a private folder for as long as the
command runs (it may hold the database password).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def toml_value(value: Any) -> str:
    """`value` (JSON-like: str, int, float, bool, list, mapping) as a TOML value;
    mappings become inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no TOML form in a Conveyor config")
        return repr(value)
    if isinstance(value, str):
        # JSON's string escapes are all valid in a TOML basic string.
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return (
            "{"
            + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items())
            + "}"
        )
    raise ValueError(f"{type(value).__name__} has no TOML form in a Conveyor config")


def toml_text(config: Mapping[str, Any]) -> str:
    """A TOML document of `config`, one top-level key a line (None values left out)."""
    return "".join(
        f"{json.dumps(str(key))} = {toml_value(value)}\n"
        for key, value in config.items()
        if value is not None
    )


@contextmanager
def written_config(config: Mapping[str, Any]) -> Iterator[Path]:
    """`config` written to a private file for as long as the block runs."""
    folder = Path(tempfile.mkdtemp(prefix="conveyor-django-"))
    try:
        path = folder / "conveyor.toml"
        path.write_text(toml_text(config), encoding="utf-8")
        path.chmod(0o600)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)
