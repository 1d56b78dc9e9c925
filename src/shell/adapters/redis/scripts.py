"""Script loading: each Lua script with its preludes and the core's values before it.

A script is `lua/<name>.lua` with preludes prepended (`QUEUE` for the queue's,
`CLAIM` for its claims, `STORE` for the store's, `QUEUE_AND_STORE` for scripts that
record an outcome, `SETTLING` for those that end a job others may wait for), and in
front of all of them a header of values the core owns, rendered here from the core:
the priorities in claim order, each priority's rank, and how long a minute's
finished count is kept. The scripts hold no rule of their own: what a job's
partition, type or finish minute is, is computed in Python and arrives as arguments
(see `arguments`), and so does what a job's end does to the jobs waiting for it
(see `settling`).
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Callable
from typing import Any, cast

from ....core import PRIORITY_ORDER, JobStatus
from ....core.throughput import FINISH_COUNT_RETENTION_S
from .cluster import Client
from .finishes import CARRIED_MAX_BYTES, INBOX_KEEP_MS
from .limits import RANK_SCALE

Script = Callable[..., Any]

#: The preludes of every queue script: keys and fences, the partition index, placement.
QUEUE = ("common", "index", "placement")
#: The preludes of a claim script: the queue's, then receipts and batch ends.
CLAIM = (*QUEUE, "claiming")
#: The prelude of every store script.
STORE = ("store_common",)
#: The preludes of a queue script that also records an outcome in the store.
QUEUE_AND_STORE = (*QUEUE, "store_common")
#: The preludes of a script that ends a job (and so settles the jobs waiting for it),
#: or writes or reads jobs that wait for others.
SETTLING = (*QUEUE_AND_STORE, "dependents")


def core_values() -> str:
    """The Lua locals every script is given from the core: `PRIORITIES` (claim
    order), `RANK` (priority name -> rank), `FINAL` (the statuses that end a job) and
    `FINISH_COUNT_KEEP_S`; from the partition index's layout (`limits.RANK_SCALE`),
    `SEQ_DIGITS`; and from the finish signals (`finishes`), the largest message that
    carries its record and how long an inbox lives after its newest message."""
    names = ", ".join(f"'{p.value}'" for p in PRIORITY_ORDER)
    ranks = ", ".join(f"{p.value} = {p.rank}" for p in PRIORITY_ORDER)
    final = ", ".join(f"{s.value} = true" for s in JobStatus if s.is_terminal)
    return (
        "-- Rendered from the core by scripts.py.\n"
        f"local PRIORITIES = {{{names}}}\n"
        f"local RANK = {{{ranks}}}\n"
        f"local FINAL = {{{final}}}\n"
        f"local FINISH_COUNT_KEEP_S = {FINISH_COUNT_RETENTION_S}\n"
        f"local SEQ_DIGITS = {len(str(RANK_SCALE)) - 1}\n"
        f"local CARRIED_MAX_BYTES = {CARRIED_MAX_BYTES}\n"
        f"local INBOX_KEEP_MS = {INBOX_KEEP_MS}\n"
    )


@functools.cache
def source(*names: str) -> str:
    """The text of `lua/<name>.lua` for each of `names`, in order, behind the core's
    values: the preludes first, the script last."""
    here = importlib.resources.files(__package__).joinpath("lua")
    parts = [here.joinpath(f"{name}.lua").read_text("utf-8") for name in names]
    return "\n".join([core_values(), *parts])


def register(client: Client, preludes: tuple[str, ...], name: str) -> Script:
    """The script `name` with `preludes` before it, registered on `client` (sent by
    EVALSHA, loaded on the first NOSCRIPT)."""
    # redis-py leaves Script.__call__ unannotated; one cast here keeps the rest typed.
    return cast(Script, client.register_script(source(*preludes, name)))
