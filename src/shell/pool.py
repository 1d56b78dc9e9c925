"""The worker pool's old import path: `WorkerPool` lives in `conveyor.shell.worker`, beside
the `Worker`s it runs (`worker_count` threads on one queue, stopped gracefully)."""

from __future__ import annotations

from .worker import WorkerPool

__all__ = ["WorkerPool"]
