"""Claim tokens: unique strings, made without a `uuid4()` per claim.

A token fences every write of a claim holder, so no two claims may ever share
one: not in this process, not in another process, not after a restart. A token
is a random prefix chosen when the process starts (80 bits from the operating
system's generator) followed by a counter. A forked child chooses a prefix of
its own before it can make a token, so a parent and its child never count from
the same prefix.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Callable

_prefix = ""
_count: Callable[[], int] = itertools.count().__next__


def _reseed() -> None:
    # No lock: this runs at import and in a freshly forked child, one thread each.
    global _prefix, _count
    _prefix = secrets.token_hex(10) + "-"
    _count = itertools.count(1).__next__


_reseed()
os.register_at_fork(after_in_child=_reseed)


def fresh_token() -> str:
    """A token no claim anywhere has had: hex digits and one dash, about 30 characters."""
    # The counter's step is atomic under the interpreter lock: no lock per token.
    return f"{_prefix}{_count():x}"
