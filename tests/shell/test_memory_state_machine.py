"""The reusable adapter model check, run on the in-memory backend."""

from conveyor.shell.adapters.memory import MemoryJobQueue
from conveyor.testing.state_machine import queue_machine

TestMemoryQueueMachine = queue_machine(lambda: (MemoryJobQueue(), lambda: None)).TestCase
