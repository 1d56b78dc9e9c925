"""The worker pool's old import path: `WorkerPool` lives in `conveyor.shell.worker.loop`, beside
the `Worker`s it runs (`worker_count` threads on one queue, stopped gracefully)."""

from __future__ import annotations

from .worker.loop import WorkerPool

__all__ = ["WorkerPool"]
