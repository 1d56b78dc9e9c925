"""Shared test helpers: the instant the tests start at, a job maker, and the crash
tools (`Crash`, where-is-my-job). They live in the shipped contract
(`conveyor.testing.contract.support`), whose cases use them too."""

from __future__ import annotations

from conveyor.testing.contract.support import T0, Crash, locate, make_job

__all__ = ["T0", "Crash", "locate", "make_job"]
