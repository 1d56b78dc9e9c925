"""The SQL `JobQueue`: work still to do, one `<prefix>_job_queue` row per job.

A row is `ready`, `scheduled` (parked until `run_at`) or `processing` (claimed).
The `payload` column is the authoritative job, `codec.encode(job)`; the other
columns are copies for the indexes.

`SqlJobQueue` is its roles put together, each in a module of its own over the state
they share (`base`): placements (`enqueue`), claims and promotion (`claims`), claims
under limits (`limits`), the claim holder's writes (`holder`), cancellation
(`cancel`), reads (`reads`), idle workers' wake-ups (`wakeups`) and running jobs'
progress (`progress`).

Times: every instant written or compared (`locked_at`, `run_at`, cutoffs) is the
`now` or `cutoff` the caller passes in, never the database clock; `server_time`
reports the database's clock so workers can check theirs against it.
"""

from __future__ import annotations

from .cancel import Cancelling
from .claims import Claiming
from .enqueue import Enqueueing
from .holder import HolderWrites
from .limits import LimitedClaiming
from .progress import ProgressNotes
from .reads import Reading
from .waiting import WaitingForWork
from .wakeups import wakeups_for
from .workflows import Workflows

__all__ = ["SqlJobQueue"]


class SqlJobQueue(
    Workflows,
    Enqueueing,
    Claiming,
    LimitedClaiming,
    HolderWrites,
    Cancelling,
    Reading,
    WaitingForWork,
    ProgressNotes,
):
    """A `JobQueue`, `TransactionalJobQueue` and `BatchingJobQueue` in a SQLite or
    PostgreSQL database.

    Create the tables first with `migration.migrate(engine)`.
    A SQLite engine not built by `make_engine` is configured the same way on first use.
    Transient errors (locks, dropped connections) are retried for up to `lock_retry_s`
    seconds per operation, here and nowhere above.
    """

    def lost_database(self) -> str | None:
        """Why this queue's SQLite file is no longer the one at its path (deleted, or
        another moved onto it), or None; always None on PostgreSQL."""
        file = self._db.file
        return None if file is None else file.lost()

    def close(self) -> None:
        """Close pooled connections (the engine reconnects if used again) and stop
        listening for wake-ups on this queue's behalf."""
        wakeups_for(self._db.engine).leave(self)
        self._db.engine.dispose()
