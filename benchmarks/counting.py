"""The one way every system's completions are counted, inside a worker process.

Every system's no-op handler calls `_hook(i, t)`; `harness` fills `_state` with the
shared counters before the system's worker starts. Kept apart from `harness` so that
`workers`, which holds the handlers, and `harness`, which builds the workers, do
not import each other.
"""

from __future__ import annotations

import time
from typing import Any

_state: dict[str, Any] = {}


def _hook(i: int, t: float) -> None:
    """What every system's no-op handler does: count, stamp, and note the latency."""
    now = time.time()
    s = _state
    with s["lock"]:
        slot = s["slot"]
        n = s["count"][slot] + 1
        s["count"][slot] = n
        s["last"][slot] = now
        if n == 1:
            s["first"][slot] = now
        if 0 <= i < s["n"]:
            s["seen"][i] += 1
            if s["want_latency"]:
                s["lat"][i] = now - t
