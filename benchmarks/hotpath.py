"""The Python a job costs in Conveyor's own code.

    python -m benchmarks.hotpath                      # memory backend, 5,000 jobs
    python -m benchmarks.hotpath --jobs 2000 --backends memory sqlite redis postgresql
    python -m benchmarks.hotpath --ref HEAD           # the package as committed

First the parts of a job's Python, each alone (validation, a memory-backend enqueue,
the codec, the core's start and decide), in CPU µs per call. Then, per backend:
single `Runtime.enqueue` per call and a worker draining those jobs in this process
(`Runtime.drain`, default settings), each as wall time and as this process's CPU
time. On a shared machine the wall figures swing with the load (printed beside
them); the CPU figures, which leave out time spent preempted, swing less.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from . import meta, workers
from .systems import ConveyorInstance, Env


def _best_of(rounds: int, fn: Any) -> float:
    """The fastest of many short runs: a shared machine preempts long ones."""
    return min(fn() for _ in range(rounds * 20))


def _cpu_us(n: int, call: Any) -> float:
    """CPU time of this process per call, in µs (time spent preempted is not counted)."""
    start = time.process_time()
    for _ in range(n):
        call()
    return (time.process_time() - start) / n * 1e6


def enqueue_and_drain(env: Env, backend: str, n: int, rounds: int) -> dict[str, float]:
    inst = ConveyorInstance(env, f"hotpath-{backend}", backend, handler=workers.plain_noop)
    enq, enq_cpu, drain, drain_cpu = [], [], [], []
    try:
        for _ in range(rounds):
            inst.reset()
            inst.next_i = 0
            rt = inst.rt
            start, cpu = time.perf_counter(), time.process_time()
            for i in range(n):
                rt.enqueue("noop", {"i": i, "t": 0.0}, queue=workers.QUEUE)
            enq.append((time.perf_counter() - start) / n * 1e6)
            enq_cpu.append((time.process_time() - cpu) / n * 1e6)
            start, cpu = time.perf_counter(), time.process_time()
            stats = rt.drain(timeout_s=600)
            took = time.perf_counter() - start
            drain_cpu.append((time.process_time() - cpu) / n * 1e6)
            if stats.completed != n:
                raise RuntimeError(f"{backend}: {stats.completed} of {n} completed")
            drain.append(n / took)
    finally:
        inst.close()
    return {
        "enqueue_us": min(enq),
        "enqueue_cpu_us": min(enq_cpu),
        "drain_jobs_s": max(drain),
        "drain_cpu_us": min(drain_cpu),
    }


def enqueue_parts(n: int, rounds: int) -> dict[str, float]:
    """The parts of a job's Python, in CPU µs per call (best of many short runs):
    validation (`create_job`), a whole memory-backend `Runtime.enqueue`, the codec on
    a new job and on a completed one, and the core's start and decide."""
    import conveyor
    from conveyor.core import Policies, Succeeded, create_job, decide, start
    from conveyor.shell import codec

    rt = conveyor.build({"provider": "memory"}, handlers={"noop": workers.plain_noop}, env={})
    now = datetime.now(UTC)
    job = create_job(id=uuid.uuid4(), job_type="noop", args={"i": 1, "t": 0.0}, now=now).unwrap()
    running = start(job, now, "worker").unwrap()
    done = decide(running, Succeeded(None), now, Policies(), 0.5).job
    text = codec.encode(job)
    batch = max(n // 50, 20)
    parts = {
        "create_job": lambda: create_job(
            id=uuid.uuid4(), job_type="noop", args={"i": 1, "t": 0.0}, now=now
        ),
        "enqueue (memory)": lambda: rt.enqueue("noop", {"i": 1, "t": 0.0}),
        "encode (new job)": lambda: codec.encode(job),
        "encode (completed job)": lambda: codec.encode(done),
        "decode": lambda: codec.decode(text),
        "start": lambda: start(job, now, "worker"),
        "decide (success)": lambda: decide(running, Succeeded(None), now, Policies(), 0.5),
    }
    try:
        return {
            name: _best_of(rounds, lambda call=call: _cpu_us(batch, call))
            for name, call in parts.items()
        }
    finally:
        rt.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hotpath", description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", nargs="*", default=["memory"])
    parser.add_argument("--ref", metavar="GIT_REF")
    args = parser.parse_args(argv)
    if args.ref:
        meta.use_ref(args.ref)
    print(f"load average {os.getloadavg()[0]:.2f} (figures: best of {args.rounds})")
    parts = enqueue_parts(args.jobs, args.rounds)
    print("CPU µs per call: " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    env = Env()
    try:
        for backend in args.backends:
            r = enqueue_and_drain(env, backend, args.jobs, args.rounds)
            print(
                f"{backend}: enqueue {r['enqueue_us']:.1f} µs/call "
                f"({r['enqueue_cpu_us']:.1f} µs of this process's CPU), "
                f"drain {r['drain_jobs_s']:,.0f} jobs/s ({r['drain_cpu_us']:.1f} µs CPU/job) "
                f"(load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    finally:
        env.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
