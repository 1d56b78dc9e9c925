"""Tying a child process's life to its parent's, on Linux.

A child whose parent is killed outright (SIGKILL, the OOM killer) has nobody left to
stop it, restart it or read its exit. `die_with_parent` asks the kernel to send the
child a signal when the parent goes (`PR_SET_PDEATHSIG`), then checks the parent is
still the one that started it, since it may have died before the request was made.
Elsewhere (no `prctl`), nothing is asked and only that check is made.

The kernel sends the signal when the *thread* that started the child ends, so a
parent starts its children from a thread that lives as long as it does; and it
sends it again each time the child passes to another thread of the dying parent,
so the child takes a repeat of it as no more than the first.
"""

from __future__ import annotations

import contextlib
import os

#: prctl's option that sets the parent-death signal.
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, signum: int) -> bool:
    """Have this process sent `signum` when its parent dies; False when its parent is
    no longer `parent` (already gone: the caller stops at once)."""
    with contextlib.suppress(Exception):  # not Linux, or no C library to ask
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)
    return os.getppid() == parent
