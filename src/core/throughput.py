"""The finished-per-minute counts the dashboard charts: which records count, the
minute each counts in, and how long a minute's count is kept.

A backend that keeps counters (Redis) asks here which counter a record moves and
for how long a counter lives; one that counts on demand (SQL, memory) counts the
same records over the same minutes. Pure: a record's minute comes from its own
`finished_at`, never from a clock.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta

from .job import JobStatus

#: The statuses whose records are counted per minute: completions and dead letters.
COUNTED_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.FAILED})

#: How long a minute's count is kept after its last count, in seconds. The dashboard
#: charts the last hour; this bounds the storage the counts take.
FINISH_COUNT_RETENTION_S = 2 * 3600

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MINUTE = timedelta(minutes=1)
_US_PER_MINUTE = 60_000_000


def minute_key(when: datetime) -> str:
    """The UTC minute `when` falls in, as `YYYYMMDDHHMM`: the name of its count."""
    return _label((when - _EPOCH) // _MINUTE)


def counted_minute(status: JobStatus, finished_us: int | None) -> str:
    """The minute a record counts in (as `minute_key` names it), given its status and
    its `finished_at` in µs since the epoch (None when it has none); "" when it is not
    counted: not completed or failed, or without a finish time. In µs, because a
    backend that stores the finish time has it so already."""
    if finished_us is None or status not in COUNTED_STATUSES:
        return ""
    return _label(finished_us // _US_PER_MINUTE)


@functools.lru_cache(maxsize=256)
def _label(minute: int) -> str:
    # Cached: a batch of finishes mostly falls in one minute.
    at = _EPOCH + minute * _MINUTE
    return f"{at.year:04d}{at.month:02d}{at.day:02d}{at.hour:02d}{at.minute:02d}"
