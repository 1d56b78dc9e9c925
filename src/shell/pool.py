"""Deprecated import path of `WorkerPool`, which lives in `conveyor.shell.worker`
beside the `Worker`s it runs. Importing this module warns; it goes in 0.5.0."""

from __future__ import annotations

import warnings

from .worker import WorkerPool

warnings.warn(
    "conveyor.shell.pool is deprecated: import WorkerPool from conveyor.shell.worker "
    "(or conveyor); this module goes in 0.5.0",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["WorkerPool"]
