"""Workers: claim jobs, run their handlers, ask the core, hand the answers to the executor.

The loop is `loop.Worker` (and `WorkerPool`, a queue's pool of them); each step of a
claimed batch lives in a module of its own: `claiming` (how a batch is claimed),
`batch` (start, run, decide, write, report), `attempt_runner` and `attempts` (one
attempt as a value), `holder_writes` (the claim holder's writes through the
executor), `reporting`, `idle`, `heartbeat` and `lease_keeper` (leases), `async_jobs`,
`timeouts` and `process_execution` (how a handler runs), `inline`, `signals` and
`forced_stop` (how a worker process stops).
"""

from .loop import Worker, WorkerPool, WorkerStats

__all__ = ["Worker", "WorkerPool", "WorkerStats"]
