"""Tools for testing code that uses Conveyor: your app's jobs, or your own adapter.

For your app's tests (see docs/testing-your-app.md)::

    from conveyor.testing import ManualClock, assert_enqueued, drain, enqueued_jobs

* `ManualClock` (`conveyor.testing.clock`): a clock that moves only when told to,
  by a timedelta, seconds or milliseconds;
* `enqueued_jobs` and `assert_enqueued` (`conveyor.testing.enqueued`): what a
  runtime's backend holds, by job type or task, queue, state and args;
* `drain` (`conveyor.testing.drain`): run everything due in the calling thread,
  moving a manual clock on to run scheduled jobs and retries.

For adapter authors: `conveyor.testing.state_machine` (needs hypothesis) and the
test servers (`postgres_server`, `redis_server`).

Importing this package loads no backend: each name loads its module on first use.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .clock import ManualClock
    from .drain import DrainLimit, drain
    from .enqueued import assert_enqueued, enqueued_jobs

_LAZY: dict[str, str] = {
    "ManualClock": ".clock",
    "drain": ".drain",
    "DrainLimit": ".drain",
    "assert_enqueued": ".enqueued",
    "enqueued_jobs": ".enqueued",
}

__all__ = ["DrainLimit", "ManualClock", "assert_enqueued", "drain", "enqueued_jobs"]

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))

    class _Package(types.ModuleType):
        """This package, which names a function after the module that defines it
        (`drain`): once that module is loaded (for `DrainLimit`, or imported by its
        path), the import system sets the package's `drain` to the module, and
        `from conveyor.testing import drain` would give the module. The function is
        kept in its place instead; the module stays `sys.modules`' entry."""

        def __setattr__(self, name: str, value: Any) -> None:
            if isinstance(value, types.ModuleType) and _LAZY.get(name) == f".{name}":
                value = getattr(value, name)
            super().__setattr__(name, value)

    sys.modules[__name__].__class__ = _Package
