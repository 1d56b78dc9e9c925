"""Conveyor's benchmark: Conveyor on every backend, its peers, and each server's limit.

    python -m benchmarks.run            # the full run (about 20 minutes on 2 cores)
    python -m benchmarks.run --quick    # a smoke run: one round, small sizes (about 1.5 minutes)
    python3 dev.py bench [--quick]      # the same, in the project's venv with the bench extra

Everything runs in one process tree, in rounds: each round measures every system
once (A B C ... A B C ...), so a slow minute of the machine lands on all of them
alike. Each figure is the median of the rounds, reported with its min-max.
Servers are started the way the tests start them (`conveyor.testing`).

Writes `benchmarks/results/latest.json`, `latest.md` and `latest.png`; with
`--update-docs` also the report block of `docs/performance.md`. See
docs/performance.md for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from . import harness, limits, meta, report
from .systems import Env, Instance, System, catalogue, prepare

RESULTS = Path(__file__).resolve().parent / "results"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "performance.md"


@attrs.frozen
class Sizes:
    """How big each measurement is."""

    rounds: int
    jobs: int  # per throughput measurement
    latency_jobs: int  # per latency measurement, enqueued 20 ms apart
    depth_small: int
    depth_large: int
    depth_measured: int  # jobs processed in each depth measurement
    limit_seconds: float
    timeout_s: float


# 20,000 jobs per throughput figure: enough that a peer's start-up or a one-off
# stall of a second does not decide its rate.
FULL = Sizes(3, 20_000, 150, 1000, 100_000, 1000, 1.0, 300.0)
QUICK = Sizes(1, 500, 25, 500, 5000, 500, 0.4, 60.0)
LATENCY_INTERVAL_S = 0.02
IDLE_BEFORE_LATENCY_S = 0.3


class Bench:
    """One run: collects raw samples as `(round, system, figure) -> value`."""

    def __init__(
        self,
        env: Env,
        sizes: Sizes,
        systems: list[System],
        phases: list[str] | None = None,
    ) -> None:
        self.env, self.sizes, self.systems = env, sizes, systems
        self.phases = phases or ["throughput", "latency", "depth"]
        self.samples: list[dict[str, Any]] = []
        self.notes: dict[str, list[str]] = {}
        self.round = 0

    def add(self, system: str, figure: str, value: float | None) -> None:
        if value is not None:
            self.samples.append(
                {"round": self.round, "system": system, "figure": figure, "value": value}
            )

    def note(self, system: str, text: str) -> None:
        notes = self.notes.setdefault(system, [])
        if text not in notes:
            notes.append(text)

    def log(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] r{self.round} {text}", flush=True)

    # ---- one batch of worker processes -------------------------------------------

    def _run_workers(
        self,
        s: System,
        inst: Instance,
        target: int,
        procs: int,
        n_slots: int,
        *,
        stats: bool = False,
        feed: bool = False,
        **extra: Any,
    ) -> tuple[harness.Outcome, dict[str, int], dict[str, int]]:
        spec = s.spec(inst, **extra)
        inst.close()
        w = harness.Workers(spec, procs, n_slots)
        before: dict[str, int] = {}
        after: dict[str, int] = {}
        try:
            w.start()
            if stats:
                before = inst.snapshot()
            w.go()
            if feed:
                inst.open()
                self._feed(inst, target)
            ok = w.wait_for(target, self.sizes.timeout_s)
        except Exception as exc:
            out = w.stop(target, True)
            out.errors.append(f"{type(exc).__name__}: {exc}")
            inst.open()
            return out, before, after
        out = w.stop(target, not ok)
        if stats:
            inst.close()
            inst.settle()
            after = inst.snapshot()
        inst.open()
        for error in out.errors:
            self.note(s.name, error)
        if out.timed_out:
            self.note(
                s.name,
                f"a measurement stopped after {self.sizes.timeout_s:.0f}s with "
                f"{out.processed}/{target} jobs done; its rate is over the jobs done",
            )
        return out, before, after

    def _feed(self, inst: Instance, count: int) -> None:
        """Enqueue `count` jobs 20 ms apart, each stamped with time.time() in its args."""
        time.sleep(IDLE_BEFORE_LATENCY_S)
        start = time.perf_counter()
        for i in range(count):
            inst.enqueue(i, time.time())
            pause = start + (i + 1) * LATENCY_INTERVAL_S - time.perf_counter()
            if pause > 0:
                time.sleep(pause)

    def _check(self, s: System, out: harness.Outcome, target: int, figure: str) -> None:
        """Record jobs run twice or not at all (a sanity check, from the shared ledger)."""
        dupes = max(0, out.processed - out.distinct)
        if dupes:
            self.add(s.name, f"duplicates_{figure}", dupes)
        if out.processed < target:
            self.add(s.name, f"unfinished_{figure}", target - out.processed)

    # ---- phases ---------------------------------------------------------------------

    def throughput(self, s: System) -> None:
        inst = s.main
        assert inst is not None
        n = self.sizes.jobs
        default = s.phases != frozenset({"throughput"})
        # 1 worker process, with the server-work, RSS and bytes-per-job figures.
        inst.reset()
        inst.next_i = 0
        inst.checkpoint()
        before = inst.snapshot()
        if default or s.backend == "memory":
            start = time.perf_counter()
            inst.enqueue_each([(i, time.time()) for i in range(n)])
            self.add(s.name, "enqueue_single", n / (time.perf_counter() - start))
        else:
            inst.fill(n)
        inst.next_i = n
        if s.backend in ("redis", "postgresql"):
            after = inst.snapshot()
            key = "__used_memory" if s.backend == "redis" else "bytes"
            self.add(s.name, "bytes_per_job", (after.get(key, 0) - before.get(key, 0)) / n)
        enqueue_wal: float | None = None
        if s.backend == "postgresql":
            # Single enqueue for the default variants, bulk (`fill`) for the others.
            enqueue_wal = (after["wal"] - before["wal"]) / n
            how = "single" if default else "bulk"
            self.add(s.name, f"pg_wal_enqueue_{how}_per_job", enqueue_wal)
        extra: dict[str, Any] = {}
        if s.backend == "memory":
            inst.reset()  # the memory backend's jobs are enqueued inside the worker process
            extra["prefill"] = n
        out, b, a = self._run_workers(s, inst, n, 1, n, stats=True, **extra)
        self._check(s, out, n, "1p")
        self.add(s.name, "processed_1p", out.rate)
        self.add(s.name, "rss_mib", out.rss_kib[0] / 1024 if out.rss_kib[0] else None)
        self._server_work(s, out, b, a, n)
        process_wal = self._wal_per_job(s, b, a, out.processed)
        if enqueue_wal is not None and process_wal is not None:
            self.add(s.name, "pg_wal_per_job", enqueue_wal + process_wal)
        self.log(f"{s.name:30s} 1 process  {out.rate:9.0f} jobs/s")
        if not default:
            return
        # 2 worker processes; bulk enqueue where the product offers it.
        if s.backend == "memory":
            self.note(s.name, "2 processes: not applicable (the memory backend is one process)")
            return
        inst.reset()
        inst.next_i = 0
        if inst.bulk_label:
            wal_before = inst.snapshot().get("wal") if s.backend == "postgresql" else None
            took = inst.fill(n)
            self.add(s.name, "enqueue_bulk", n / took)
            if wal_before is not None:
                wal = (inst.snapshot()["wal"] - wal_before) / n
                self.add(s.name, "pg_wal_enqueue_bulk_per_job", wal)
            self.note(s.name, f"bulk enqueue: {inst.bulk_label}")
        else:
            inst.fill(n)
        out, _, _ = self._run_workers(s, inst, n, 2, n)
        self._check(s, out, n, "2p")
        self.add(s.name, "processed_2p", out.rate)
        self.log(f"{s.name:30s} 2 processes {out.rate:8.0f} jobs/s")

    def _server_work(
        self, s: System, out: harness.Outcome, b: dict[str, int], a: dict[str, int], n: int
    ) -> None:
        if not b or not a or out.processed <= 0:
            return
        done = out.processed
        if s.backend == "redis":
            delta = {k: a.get(k, 0) - b.get(k, 0) for k in a if not k.startswith("__")}
            total = sum(v for v in delta.values() if v > 0)
            scripts = sum(delta.get(k, 0) for k in ("evalsha", "eval", "fcall", "fcall_ro"))
            self.add(s.name, "redis_commands_per_job", total / done)
            self.add(s.name, "redis_scripts_per_job", scripts / done)
            self.add(s.name, "round_trips_per_job", out.round_trips / done)
            top = sorted(((v, k) for k, v in delta.items() if v > 0), reverse=True)[:8]
            if any(t.startswith("commands per job") for t in self.notes.get(s.name, [])):
                return
            self.note(
                s.name,
                "commands per job (one round): " + ", ".join(f"{k} {v / done:.2f}" for v, k in top),
            )
        elif s.backend == "postgresql":
            commits = a["commits"] - b["commits"]
            rows = sum(a[k] - b[k] for k in ("ins", "upd", "del"))
            self.add(s.name, "pg_commits_per_job", commits / done)
            self.add(s.name, "pg_rows_per_job", rows / done)
            for k in ("ins", "upd", "del"):
                self.add(s.name, f"pg_{k}_per_job", (a[k] - b[k]) / done)

    def _wal_per_job(
        self, s: System, b: dict[str, int], a: dict[str, int], done: int
    ) -> float | None:
        """PostgreSQL: WAL bytes per job the workers wrote (claims, finishes, records,
        and the autovacuum they caused), from the server's WAL position before and
        after. The position is the whole server's: nothing else runs meanwhile."""
        if s.backend != "postgresql" or "wal" not in b or "wal" not in a or done <= 0:
            return None
        per_job = (a["wal"] - b["wal"]) / done
        self.add(s.name, "pg_wal_process_per_job", per_job)
        return per_job

    def latency(self, s: System) -> None:
        inst = s.main
        assert inst is not None
        m = self.sizes.latency_jobs
        inst.reset()
        if s.backend == "memory":
            plan = {"count": m, "interval_s": LATENCY_INTERVAL_S, "idle_s": IDLE_BEFORE_LATENCY_S}
            out, _, _ = self._run_workers(s, inst, m, 1, m, latency=True, inproc_latency=plan)
        else:
            out, _, _ = self._run_workers(s, inst, m, 1, m, latency=True, feed=True)
        self._check(s, out, m, "latency")
        lat = out.latencies
        if lat:
            p50 = harness.percentile(lat, 50) * 1000
            p99 = harness.percentile(lat, 99) * 1000
            self.add(s.name, "latency_p50_ms", p50)
            self.add(s.name, "latency_p99_ms", p99)
            self.add(s.name, "latency_max_ms", max(lat) * 1000)
            self.log(f"{s.name:30s} pickup p50 {p50:7.2f} ms  p99 {p99:7.2f} ms")

    def depth(self, s: System, first: bool) -> None:
        small, large, m = self.sizes.depth_small, self.sizes.depth_large, self.sizes.depth_measured
        inst = s.main
        assert inst is not None
        memory = s.backend == "memory"
        # Shallow: `small` queued, process `m` of them.
        inst.reset()
        inst.next_i = 0
        extra: dict[str, Any] = {}
        if memory:
            extra["prefill"] = small
        else:
            inst.fill(small)
        out, _, _ = self._run_workers(s, inst, min(m, small), 1, small, **extra)
        shallow = out.rate
        self.add(s.name, "depth_small", shallow)
        # Deep: `large` queued (filled once, topped up after each round), process `m`.
        deep = s.deep
        if memory:
            out, _, _ = self._run_workers(s, inst, m, 1, large, prefill=large)
        else:
            assert deep is not None
            if first:
                took = deep.fill(large)
                self.add(s.name, "deep_fill_s", took)
            out, _, _ = self._run_workers(s, deep, m, 1, deep.next_i)
            deep.fill(m)  # back to `large` queued for the next round
        self.add(s.name, "depth_large", out.rate)
        if shallow > 0 and out.rate > 0:
            self.add(s.name, "depth_ratio", out.rate / shallow)
        self.log(f"{s.name:30s} depth {small}: {shallow:8.0f}/s  {large}: {out.rate:8.0f}/s")

    def run(self, pg_limit: limits.PgLimit) -> None:
        for r in range(1, self.sizes.rounds + 1):
            self.round = r
            self.add("machine", "load_1min", os.getloadavg()[0])
            measured = limits.measure_all(self.env, pg_limit, self.sizes.limit_seconds)
            for key, value in measured.items():
                self.add("limit", key, value)
            self.log("limits " + ", ".join(f"{k} {v:,.0f}" for k, v in measured.items()))
            for phase in self.phases:
                for s in self.systems:
                    if phase not in s.phases:
                        continue
                    # The load average beside each figure: a busy minute shows.
                    self.add(s.name, f"load_1min_{phase}", os.getloadavg()[0])
                    try:
                        if phase == "throughput":
                            self.throughput(s)
                        elif phase == "latency":
                            self.latency(s)
                        else:
                            self.depth(s, first=r == 1)
                    except Exception as exc:
                        self.log(f"{s.name} {phase} failed: {type(exc).__name__}: {exc}")
                        self.note(s.name, f"{phase} round {r} failed: {type(exc).__name__}: {exc}")


def aggregate(samples: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Median, min and max of each (system, figure) over the rounds."""
    grouped: dict[tuple[str, str], list[float]] = {}
    for s in samples:
        grouped.setdefault((s["system"], s["figure"]), []).append(float(s["value"]))
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (system, figure), values in grouped.items():
        out.setdefault(system, {})[figure] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "n": len(values),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run with small sizes")
    parser.add_argument("--only", nargs="*", help="run only these systems (by name)")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--jobs", type=int, help="override the jobs per throughput figure")
    parser.add_argument(
        "--phases", nargs="*", choices=["throughput", "latency", "depth"], help="run only these"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument(
        "--update-docs", action="store_true", help="rewrite the report block in docs/performance.md"
    )
    parser.add_argument(
        "--ref",
        metavar="GIT_REF",
        help="benchmark the package as committed at GIT_REF (e.g. HEAD) instead of the work tree",
    )
    parser.add_argument(
        "--render", type=Path, metavar="JSON", help="only re-render the report from a result file"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.render:
        result = json.loads(args.render.read_text())
        write_outputs(result, args.render.parent, args.update_docs)
        return 0
    if args.ref:
        meta.use_ref(args.ref)
    sizes = QUICK if args.quick else FULL
    if args.rounds:
        sizes = attrs.evolve(sizes, rounds=args.rounds)
    if args.jobs:
        sizes = attrs.evolve(sizes, jobs=args.jobs)
    started = time.time()
    print(f"conveyor benchmark ({'quick' if args.quick else 'full'}): {sizes}", flush=True)
    env = Env()
    try:
        wanted = catalogue()
        if args.only:
            wanted = [s for s in wanted if s.name in args.only]
        systems = prepare(wanted, env, with_deep=True)
        for name, problem in env.problems.items():
            print(f"!! {name} cannot run here: {problem}", flush=True)
        pg_limit = limits.PgLimit(env)
        bench = Bench(env, sizes, systems, phases=args.phases)
        bench.run(pg_limit)
        result = {
            "meta": {
                **meta.collect(env, pg_limit),
                "mode": "quick" if args.quick else "full",
                "sizes": attrs.asdict(sizes),
                "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
                "duration_s": round(time.time() - started, 1),
            },
            "systems": {
                s.name: {
                    "product": s.product,
                    "backend": s.backend,
                    "variant": s.variant,
                    "phases": sorted(s.phases),
                }
                for s in systems
            },
            "problems": env.problems,
            "notes": bench.notes,
            "figures": aggregate(bench.samples),
            "samples": bench.samples,
        }
    finally:
        env.cleanup()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    write_outputs(result, args.out, args.update_docs)
    print(f"done in {time.time() - started:.0f}s", flush=True)
    return 0


def write_outputs(result: dict[str, Any], folder: Path, update_docs: bool) -> None:
    """latest.md and latest.png beside the JSON; the docs block when asked."""
    markdown = report.markdown(result)
    (folder / "latest.md").write_text(markdown)
    drew = report.chart(result, folder / "latest.png")
    if update_docs:
        report.update_docs(DOCS, markdown)
    print(f"wrote {folder}/latest.json, latest.md" + (", latest.png" if drew else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main())
