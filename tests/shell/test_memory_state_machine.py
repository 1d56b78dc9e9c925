"""The reusable adapter model check, run on the in-memory backend."""

from conveyor.shell.adapters.memory import MemoryJobQueue, MemoryJobStore
from conveyor.testing.state_machine import queue_machine


def memory_queue() -> tuple[MemoryJobQueue, object, MemoryJobStore]:
    store = MemoryJobStore()
    return MemoryJobQueue(store), lambda: None, store


TestMemoryQueueMachine = queue_machine(memory_queue).TestCase
