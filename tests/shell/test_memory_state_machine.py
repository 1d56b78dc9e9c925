"""The contract's hypothesis state machine, run on the in-memory backend through the
contract's own entry point (`conveyor.testing.contract.state_machine`), as a user
runs it on their adapter."""

from backends import make_backend
from conveyor.testing.contract import Subject, state_machine


def memory() -> Subject:
    return make_backend("memory")


TestMemoryQueueMachine = state_machine(memory).TestCase
