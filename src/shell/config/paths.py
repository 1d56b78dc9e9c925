"""Relative SQLite paths in a config file are read from the file's folder.

`url = "sqlite:///jobs.db"` in `/srv/app/conveyor.toml` means `/srv/app/jobs.db`,
whichever directory a command runs from: `conveyor --config /srv/app/conveyor.toml
status` run from elsewhere reads the same database the project wrote, where it would
otherwise have opened (and created) a `jobs.db` in the shell's directory. So does the
default `sqlite:///conveyor.db` when a config file chooses provider `db` and names no
URL. A path given by the environment (`CONVEYOR_URL`), by a mapping passed to `build`
or by no config file at all is read from the current directory, as a shell would.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: `sqlite:///` (any driver), the path, then any query. Four slashes: an absolute path.
_SQLITE = re.compile(r"^(sqlite(?:\+\w+)?:///)([^?]*)(\?.*)?$")


def anchor_sqlite(url: str, folder: Path) -> str:
    """`url` with a relative SQLite file path made absolute against `folder`; any other
    URL (a server, an absolute path, `:memory:`, a `file:` URI) unchanged."""
    found = _SQLITE.match(url)
    if found is None:
        return url
    prefix, path, query = found.group(1), found.group(2), found.group(3) or ""
    if not path or path == ":memory:" or path.startswith(("/", "file:")):
        return url
    return f"{prefix}{folder / path}{query}"


def anchored(raw: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """A config file's raw table with its SQLite paths (`url`, `tenancy.url`) read
    from `folder`."""
    out = dict(raw)
    folder = folder.absolute()
    if isinstance(out.get("url"), str):
        out["url"] = anchor_sqlite(out["url"], folder)
    tenancy = out.get("tenancy")
    if isinstance(tenancy, Mapping) and isinstance(tenancy.get("url"), str):
        out["tenancy"] = {**tenancy, "url": anchor_sqlite(tenancy["url"], folder)}
    return out


def with_default_database(
    merged: dict[str, Any], folder: Path, default_url: str, default_provider: str
) -> dict[str, Any]:
    """`merged` (a config file with the environment applied) with the default SQLite
    database beside the file, when the provider is `db` and no URL was given."""
    if merged.get("provider", default_provider) == "db" and "url" not in merged:
        return {**merged, "url": anchor_sqlite(default_url, folder.absolute())}
    return merged


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL opens, or None for another database, an in-memory one,
    or a `file:` URI (whose options may say not to create it)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:"):
        return None
    return Path(database)
