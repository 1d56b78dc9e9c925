"""A progress report as the queue stores it beside a claim, and as views show it.

The queue keeps the newest report of a running attempt as one short text, written
with the claim's lease renewal and fenced by the claim's token like the renewal.
The text names that token, so a report left behind by an earlier attempt (a retry,
a reclaim) is never shown as the progress of the next one: a reader shows it only
while the same token still holds the job.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from ..core import Progress, freeze, thaw

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def note_of(token: str, report: Progress) -> str:
    """The stored text of `report`, made under the claim `token`."""
    at_us = (report.at - _EPOCH) // timedelta(microseconds=1)
    doc = {"token": token, "fraction": report.fraction, "value": thaw(report.value), "at": at_us}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def report_of(note: str | None, token: str | None) -> Progress | None:
    """The report stored as `note`, while the claim `token` that made it still holds
    the job; None for no note, another claim's, or one that does not decode."""
    if note is None or token is None:
        return None
    try:
        doc = json.loads(note)
        if not isinstance(doc, dict) or doc.get("token") != token:
            return None
        fraction = doc.get("fraction")
        at = _EPOCH + timedelta(microseconds=int(doc["at"]))
        return Progress(
            None if fraction is None else float(fraction), freeze(doc.get("value")), at
        )
    except (ValueError, TypeError, KeyError, OverflowError):
        return None


def progress_dict(report: Progress | None) -> dict[str, Any] | None:
    """A report as plain JSON: `fraction` (0 to 1, or None), `value` (plain JSON, or
    None) and `at` (ISO 8601, by the worker's clock)."""
    if report is None:
        return None
    return {"fraction": report.fraction, "value": thaw(report.value), "at": report.at.isoformat()}
