"""What the CLI tells the operator on stderr besides its log: start banners, the
addresses it serves on, the signal that stops it, the one-line error it exits with.

These lines show whatever `--log-level` says (an operator needs the dashboard's
address even at WARNING), so they are not log records. In `--log-format json`
they are written as the log's own JSON objects, so that every line a collector
reads from stderr parses; in text they are the bare line.
"""

from __future__ import annotations

import logging
import sys

from .logs import JsonFormatter

#: The logger name a notice carries in JSON.
NOTICE_LOGGER = "conveyor.cli"

_format: dict[str, str | bool | None] = {"json": False, "process": None}


def use_json(on: bool, process_index: str | None = None) -> None:
    """Write the notices that follow as JSON objects (True) or bare lines (False); in
    JSON, a copy under `worker --processes` names itself as its log lines do."""
    _format["json"], _format["process"] = on, process_index


def notice(message: str, *, level: int = logging.INFO) -> None:
    """One line for the operator on stderr, in the CLI's log format."""
    if _format["json"]:
        record = logging.LogRecord(NOTICE_LOGGER, level, __file__, 0, message, None, None)
        process = _format["process"]
        line = JsonFormatter(process if isinstance(process, str) else None).format(record)
    else:
        line = message
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr is gone (a closed pipe): nothing left to tell
