"""Progress: what a running handler says about how far it has come.

A handler reports a `fraction` of its work done (a number from 0 to 1), a small
JSON `value` (`{"rows": 4000, "stage": "upload"}`), or both. The report is checked
here, so a bad one is refused where it is made, naming the field; the shell stores
the newest report of a running attempt with the claim (at most one write per
heartbeat, however often the handler reports) and shows it beside the job.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

from .errors import FieldError, ValidationError
from .frozen import NotJson, freeze, json_size

#: The largest progress value, in bytes of compact UTF-8 JSON: progress is a short
#: note, written again and again while the job runs, not a place for data.
MAX_PROGRESS_BYTES = 4096


@attrs.frozen(slots=True)
class Progress:
    """One progress report: `fraction` done (0 to 1) and/or a frozen JSON `value`,
    as the handler reported them at `at` (by the worker's clock)."""

    fraction: float | None
    value: Any
    at: datetime


def make_progress(fraction: object, value: object, at: datetime) -> Progress | FieldError:
    """The report of `fraction` and `value` made at `at`, or why it is refused: a
    fraction that is not a number from 0 to 1, a value that is not JSON or is larger
    than `MAX_PROGRESS_BYTES`, or neither of them given."""
    if fraction is None and value is None:
        return FieldError("progress", "give a fraction (0 to 1), a value, or both")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            return FieldError("fraction", f"must be a number from 0 to 1, got {fraction!r}")
        # Compared as it is: NaN fails both bounds, and an int past any float has none.
        if not 0 <= fraction <= 1:
            # A huge int is not shown: past 4,300 digits Python cannot even print it.
            past = isinstance(fraction, int) and fraction.bit_length() > 64
            got = "an integer past 2**64" if past else repr(fraction)
            return FieldError("fraction", f"must be from 0 to 1, got {got}")
        fraction = float(fraction)
    frozen: Any = None
    if value is not None:
        try:
            frozen = freeze(value, path="value", max_depth=8)
            size = json_size(frozen)
        except NotJson as exc:
            return FieldError("value", f"not JSON at {exc.path}: {exc.reason}")
        except (RecursionError, ValueError):
            return FieldError("value", "cannot be encoded as JSON")
        if size > MAX_PROGRESS_BYTES:
            return FieldError(
                "value", f"is {size} bytes as JSON; the limit is {MAX_PROGRESS_BYTES} bytes"
            )
    return Progress(fraction, frozen, at)


def progress(fraction: object, value: object, at: datetime) -> Progress:
    """`make_progress`, raising its refusal as a `ValidationError` (for handlers)."""
    made = make_progress(fraction, value, at)
    if isinstance(made, FieldError):
        raise ValidationError((made,))
    return made
