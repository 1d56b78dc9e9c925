"""Stored text on an operator's terminal: shown, never obeyed.

Error messages, partition keys, worker hosts and tracebacks come from job data and
from other machines. Printed raw, a byte such as ESC starts a terminal escape
sequence: `ESC[2J` clears the operator's screen, others retitle the window, move
the cursor or hide the lines that follow. So every line the CLI prints of stored
text goes through `escape` (one line) or `escape_lines` (newlines kept): each
character that is not printable is written as its Python escape (`\\x1b`,
`\\u202e`, `\\n`), as `ascii()` spells it. JSON output needs nothing more: the JSON
encoder escapes control characters itself.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import TextIO


def _shown(char: str) -> str:
    return char if char.isprintable() else ascii(char)[1:-1]


def escape(text: str) -> str:
    """`text` on one line: newlines, tabs, ESC and every other character that is not
    printable (control, format and bidirectional marks, lone surrogates) escaped."""
    if text.isprintable():
        return text
    return "".join(_shown(char) for char in text)


def escape_lines(text: str) -> str:
    """`text` with its line breaks kept and every other unprintable character escaped
    (for a traceback or a log message of several lines)."""
    return "\n".join(escape(line) for line in text.split("\n"))


def clipped(text: str, limit: int) -> str:
    """`text`, or its first `limit - 3` characters and "..." when it is longer: a cut
    that shows (a message cut at "for 30" of "for 3000 ms" read as 30), in ASCII so
    that a terminal of any encoding prints it."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(value: str, limit: int = 60) -> str:
    """`value` quoted for a message about it, clipped: an error page or line does not
    repeat a query of thousands of characters."""
    return clipped(repr(value), limit)


def cell(value: object) -> str:
    """One table cell: `-` for None, else the value's text on one line, escaped."""
    return "-" if value is None else escape(str(value))


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], file: TextIO | None = None
) -> None:
    """Columns padded to their widest cell under a header and a rule; every cell escaped."""
    out = file or sys.stdout
    cells = [[cell(h) for h in headers], *[[cell(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(text.ljust(widths[i]) for i, text in enumerate(row)).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)


class TerminalFilter(logging.Filter):
    """A handler filter for text logs: each record's message and traceback with every
    unprintable character but the line break escaped. Put it after any filter that
    rewrites the message (the redaction)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True  # arguments that do not fit the format: the handler says so
        record.msg, record.args = escape_lines(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = escape_lines(record.exc_text)
        if record.stack_info:
            record.stack_info = escape_lines(record.stack_info)
        return True
