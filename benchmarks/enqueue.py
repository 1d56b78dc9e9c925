"""Enqueue speed alone: Conveyor and its peers, one by one and in bulk, in rounds.

    python -m benchmarks.enqueue                        # 3 rounds of 5,000 jobs each
    python -m benchmarks.enqueue --jobs 20000 --rounds 2
    python -m benchmarks.enqueue --only conveyor-redis huey-redis
    python -m benchmarks.enqueue --ref HEAD             # the package as committed

The enqueue figures of the full run (`benchmarks.run`, docs/performance.md), without
its worker phases: each round enqueues `--jobs` jobs one by one into every system's
emptied instance (A B C ... A B C ...), then in bulk (1,000 per call) where the
product has a bulk call, through the same `Instance` calls the full run makes. Each
figure is the median of the rounds with its min-max, printed beside the machine's
1-minute load average, with Conveyor's ratio to the best peer on its backend.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

from . import meta
from .systems import Env, System, catalogue, prepare

#: The default variant of each product on each backend (the enqueuing side is the same
#: for all variants of one product).
DEFAULT_SYSTEMS = (
    "conveyor-sqlite",
    "huey-sqlite",
    "conveyor-postgresql",
    "pgqueuer-postgresql",
    "procrastinate-postgresql",
    "conveyor-redis",
    "huey-redis",
    "dramatiq-redis",
)


def _measure(s: System, jobs: int, bulk: bool) -> float:
    inst = s.main
    assert inst is not None
    inst.reset()
    inst.next_i = 0
    if bulk:
        return jobs / inst.fill(jobs)
    start = time.perf_counter()
    inst.enqueue_each([(i, time.time()) for i in range(jobs)])
    return jobs / (time.perf_counter() - start)


def _line(name: str, values: list[float], best: float | None) -> str:
    med = statistics.median(values)
    ratio = f"  {med / best:5.2f}x best peer" if best else ""
    return f"  {name:28s} {med:9,.0f}/s  ({min(values):,.0f}-{max(values):,.0f}){ratio}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.enqueue", description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000, help="jobs per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="these systems (by name)")
    parser.add_argument("--ref", metavar="GIT_REF", help="benchmark src/ as committed at GIT_REF")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    logging.basicConfig(level=logging.ERROR)
    if args.ref:
        meta.use_ref(args.ref)
    wanted = set(args.only or DEFAULT_SYSTEMS)
    env = Env()
    results: dict[tuple[str, str], list[float]] = {}
    loads: list[float] = []
    try:
        systems = prepare([s for s in catalogue() if s.name in wanted], env, with_deep=False)
        for name, problem in env.problems.items():
            print(f"!! {name} cannot run here: {problem}", flush=True)
        for r in range(1, args.rounds + 1):
            loads.append(os.getloadavg()[0])
            for how in ("single", "bulk"):
                for s in systems:
                    assert s.main is not None
                    if how == "bulk" and not s.main.bulk_label:
                        continue
                    rate = _measure(s, args.jobs, how == "bulk")
                    results.setdefault((how, s.name), []).append(rate)
                    load = os.getloadavg()[0]
                    print(f"[r{r} load {load:.2f}] {s.name:28s} {how:6s} {rate:9,.0f}/s")
    finally:
        env.cleanup()
    print(
        f"\n{args.rounds} rounds of {args.jobs:,} jobs; 1-minute load at each round's start "
        f"{min(loads):.2f}-{max(loads):.2f} (median {statistics.median(loads):.2f})"
    )
    backends = {s.name: s.backend for s in catalogue()}
    for how in ("single", "bulk"):
        print(f"enqueue, {'one by one' if how == 'single' else 'bulk, 1,000 per call'}:")
        for backend in ("memory", "sqlite", "postgresql", "redis"):
            here = {n: v for (h, n), v in results.items() if h == how and backends[n] == backend}
            peers = [statistics.median(v) for n, v in here.items() if not n.startswith("conveyor")]
            best = max(peers) if peers else None
            for name, values in here.items():
                print(_line(name, values, best if name.startswith("conveyor") else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
