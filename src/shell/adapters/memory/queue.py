"""The memory backend's `JobQueue`: one class, put together from one module per job
of the port (see the package's docstring)."""

from __future__ import annotations

from .cancel import Cancelling
from .claims import Claiming
from .enqueue import Enqueueing
from .holder import HolderWrites
from .limited import LimitedClaiming
from .progress import ProgressNotes
from .reads import Reads
from .workflows import Workflows


class MemoryJobQueue(
    Enqueueing,
    Claiming,
    LimitedClaiming,
    HolderWrites,
    Cancelling,
    Reads,
    ProgressNotes,
    Workflows,
):
    """A `JobQueue` in this process's memory.

    Given the `MemoryJobStore` it works with, it also finishes jobs (record and
    release) in one step and claims in batches, like the server backends.
    """

    def close(self) -> None:
        """Nothing to release."""
