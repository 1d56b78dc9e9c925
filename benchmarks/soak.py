"""The soak: many jobs, several worker processes, kill -9 every few seconds, one
server restart, then the ledger's verdict. Not part of the test run.

    python -m benchmarks.soak --backend sqlite --jobs 20000
    python -m benchmarks.soak --backend redis            # 100 000 jobs
    python -m benchmarks.soak --backend postgresql --workers 4 --json soak.json

A producer thread enqueues `--jobs` jobs (`enqueue_many`, `--batch` at a time)
through the fault tests' ledger (a separate SQLite file; `tests/faults/ledger.py`),
at `--rate` per second or flat out, while `--workers` processes of
`tests/faults/fault_worker.py` run them, each with `--threads` worker threads and
a `--lease-ms` lease. Every `--kill-min`..`--kill-max` seconds one worker, chosen
at random, gets SIGKILL and is started again. Once, when 40 % of the jobs are
done, the server is crashed and restarted: Redis by SIGKILL (AOF, `appendfsync
always`), PostgreSQL by an immediate shutdown (WAL replay); SQLite has no server,
so nothing is restarted there. When the producer is done and the queue empty, the
workers stop, a clean worker drains what is left, and the soak prints:

* the ledger figures: lost, unexpected, duplicates (and their bound), overlap, stuck;
* throughput per 10 s (jobs whose effect was committed in each window);
* enqueue -> done latency percentiles (the enqueue call's return to the effect);
* reclaims, dead letters, kills, enqueue errors;
* worker RSS: the mean and max resident set per 10 s window.

Exit status 0 when lost = unexpected = stuck = overlap = 0 and the duplicates stay
within their bound; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

FAULTS = Path(__file__).resolve().parent.parent / "tests" / "faults"
sys.path.insert(0, str(FAULTS))

from fault_harness import Site, WorkerProc, empty_backend, make_site  # noqa: E402
from fault_worker import drain_until_empty, pending  # noqa: E402
from ledger import Figures, figures  # noqa: E402

WINDOW_S = 10.0


class Server:
    """The backend's server, if it has one we may restart."""

    def __init__(self, backend: str, folder: Path) -> None:
        self.backend = backend
        self.handle: Any = None
        if backend == "redis":
            from conveyor.testing.redis_server import RedisServer

            self.handle = RedisServer(extra_args=["--appendfsync", "always"]).start()
            self.url = self.handle.url
        elif backend == "postgresql":
            from fault_pg import PgCluster

            self.handle = PgCluster().start()
            self.url = self.handle.url
        else:
            self.url = empty_backend("sqlite", folder)

    def restart(self) -> str:
        if self.backend == "redis":
            self.handle.kill()
            time.sleep(0.5)
            self.handle.start()
            return "redis-server SIGKILL, restarted from its AOF"
        if self.backend == "postgresql":
            self.handle.crash()
            time.sleep(0.5)
            self.handle.start()
            return "PostgreSQL immediate shutdown, restarted (WAL replay)"
        return "SQLite has no server: nothing restarted"

    def cleanup(self) -> None:
        if self.handle is not None:
            self.handle.cleanup()


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Soak:
    def __init__(self, a: argparse.Namespace, site: Site, server: Server) -> None:
        self.a, self.site, self.server = a, site, server
        self.rng = random.Random(a.seed)
        self.fleet: list[WorkerProc] = []
        self.kills = 0
        self.restart_note = "not reached"
        self.rss: dict[int, list[float]] = defaultdict(list)  # window -> samples
        self.started = time.time()

    def spawn(self) -> WorkerProc:
        return self.site.spawn(
            threads=self.a.threads,
            ready=False,
            lease_ms=self.a.lease_ms,
            prefetch=self.a.prefetch,
        )

    def produce(self) -> None:
        """Enqueue `--jobs` jobs in batches of `--batch` (`enqueue_many`), each batch's
        attempts recorded in the ledger before the call and its outcome after; a failed
        batch is retried whole (same ids: an upsert) after a pause."""
        a, ledger = self.a, self.site.ledger
        pause = a.batch / a.rate if a.rate else 0.0
        left = a.jobs
        while left > 0:
            jobs = [self.site.job(sleep_ms=a.sleep_ms) for _ in range(min(a.batch, left))]
            ids = [str(j.id) for j in jobs]
            for attempt in range(1, 51):
                rows = ledger.enqueue_attempts(ids, attempt)
                try:
                    self.site.queue.enqueue_many(jobs)
                except Exception as exc:
                    ledger.enqueue_outcomes(rows, exc)
                    time.sleep(min(0.05 * attempt, 0.5))
                    continue
                ledger.enqueue_outcomes(rows, None)
                break
            left -= len(jobs)
            if pause:
                time.sleep(pause)

    def done_count(self) -> int:
        [(n,)] = self.site.ledger.query("SELECT count(*) FROM effects")
        return int(n)

    def run(self) -> None:
        a = self.a
        self.fleet = [self.spawn() for _ in range(a.workers)]
        producer = threading.Thread(target=self.produce, daemon=True, name="producer")
        producer.start()
        next_kill = time.monotonic() + self.rng.uniform(a.kill_min, a.kill_max)
        next_sample = time.monotonic()
        restarted = False
        deadline = time.monotonic() + a.timeout
        while time.monotonic() < deadline:
            time.sleep(0.2)
            now = time.monotonic()
            if now >= next_sample:
                window = int((time.time() - self.started) // WINDOW_S)
                for proc in self.fleet:
                    if proc.alive and (mb := rss_mb(proc.pid)) is not None:
                        self.rss[window].append(mb)
                next_sample = now + WINDOW_S / 2
            done = self.done_count()
            if not restarted and done >= 0.4 * a.jobs:
                restarted = True
                self.restart_note = self.server.restart()
                print(f"[soak] {done} done: {self.restart_note}", flush=True)
            for i, proc in enumerate(self.fleet):
                if not proc.alive:  # crashed on its own: note it and replace it
                    self.site.dead.add(proc.pid)
                    self.site.ledger.died(proc.pid)
                    self.fleet[i] = self.spawn()
            if not producer.is_alive() and self._empty():
                break
            if now >= next_kill:
                victim = self.rng.randrange(len(self.fleet))
                self.fleet[victim].kill()
                self.kills += 1
                self.fleet[victim] = self.spawn()
                next_kill = now + self.rng.uniform(a.kill_min, a.kill_max)
                print(f"[soak] kill -9 #{self.kills}; {done}/{a.jobs} done", flush=True)
        for proc in self.fleet:
            if proc.alive:
                proc.signal(signal.SIGTERM)
        for proc in self.fleet:
            try:
                proc.wait(30)
            except AssertionError:
                proc.kill()
        drain_until_empty(
            self.site.queue,
            self.site.store,
            self.site.ledger,
            lease_ms=a.lease_ms,
            timeout_s=60,
            threads=2,
        )

    def _empty(self) -> bool:
        try:
            return pending(self.site.queue) == 0
        except Exception:
            return False

    # ---- the report ---------------------------------------------------------

    def report(self) -> tuple[Figures, dict[str, Any]]:
        ledger = self.site.ledger
        f = figures(ledger, in_flight=self.site.counts().in_flight, dead_pids=self.site.dead)
        start = self.started
        per_window: dict[int, int] = defaultdict(int)
        for (at,) in ledger.query("SELECT at FROM effects"):
            per_window[int((at - start) // WINDOW_S)] += 1
        rows = ledger.query(
            "SELECT e.at - q.done_at FROM effects e JOIN "
            "(SELECT job_id, min(done_at) AS done_at FROM enqueues WHERE outcome = 'ok' "
            "GROUP BY job_id) q ON q.job_id = e.job_id"
        )
        latencies = sorted(r[0] for r in rows)
        [(reclaims,)] = ledger.query("SELECT count(*) FROM writes WHERE op = 'reclaim' AND ok")
        dead = sum(self.site.store.count_dead().values())
        [(last,)] = ledger.query("SELECT max(at) FROM effects")
        elapsed = (last or start) - start

        def pct(p: float) -> float:
            if not latencies:
                return float("nan")
            return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))]

        out = {
            "backend": self.a.backend,
            "jobs": self.a.jobs,
            "workers": self.a.workers,
            "threads": self.a.threads,
            "lease_ms": self.a.lease_ms,
            "elapsed_s": round(elapsed, 1),
            "mean_jobs_per_s": round(f.completed / elapsed, 1) if elapsed > 0 else None,
            "figures": {k: v for k, v in vars(f).items() if not isinstance(v, frozenset)},
            "kills": self.kills,
            "server_restart": self.restart_note,
            "reclaims": int(reclaims),
            "dead_letters": dead,
            "throughput_per_10s": [per_window[w] for w in range(max(per_window) + 1)],
            "latency_s": {
                "p50": round(pct(50), 3),
                "p90": round(pct(90), 3),
                "p99": round(pct(99), 3),
                "max": round(latencies[-1], 3) if latencies else None,
            },
            "worker_rss_mb": [
                {
                    "window": w,
                    "mean": round(sum(s) / len(s), 1),
                    "max": round(max(s), 1),
                }
                for w, s in sorted(self.rss.items())
            ],
        }
        return f, out


def print_report(f: Figures, r: dict[str, Any]) -> None:
    print()
    print(
        f"soak on {r['backend']}: {r['jobs']} jobs, {r['workers']} worker processes x "
        f"{r['threads']} threads, lease {r['lease_ms']} ms"
    )
    print(f"  ledger:     {f.line()}")
    print(f"  elapsed:    {r['elapsed_s']} s, {r['mean_jobs_per_s']} jobs/s on average")
    print(f"  faults:     {r['kills']} kill -9; {r['server_restart']}")
    print(f"  reclaims:   {r['reclaims']}   dead letters: {r['dead_letters']}")
    print(f"  per 10 s:   {' '.join(str(n) for n in r['throughput_per_10s'])}")
    lat = r["latency_s"]
    print(
        f"  enqueue->done latency: p50 {lat['p50']} s, p90 {lat['p90']} s, "
        f"p99 {lat['p99']} s, max {lat['max']} s"
    )
    rss = " ".join(f"{x['mean']:.0f}/{x['max']:.0f}" for x in r["worker_rss_mb"])
    print(f"  worker RSS per 10 s (mean/max MB): {rss}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["sqlite", "postgresql", "redis"], default="sqlite")
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=3, help="worker processes")
    p.add_argument("--threads", type=int, default=2, help="worker threads per process")
    p.add_argument("--prefetch", type=int, default=1)
    p.add_argument("--lease-ms", type=int, default=1500)
    p.add_argument("--sleep-ms", type=int, default=0, help="each job's handler sleeps this")
    p.add_argument("--rate", type=float, default=0, help="enqueues per second (0 = flat out)")
    p.add_argument("--batch", type=int, default=50, help="jobs per enqueue_many call")
    p.add_argument("--kill-min", type=float, default=3.0)
    p.add_argument("--kill-max", type=float, default=6.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=3600, help="seconds before giving up")
    p.add_argument("--json", default=None, help="also write the report here")
    p.add_argument("--keep", action="store_true", help="keep the ledger and logs")
    a = p.parse_args(argv)

    folder = Path(tempfile.mkdtemp(prefix="conveyor-soak-"))
    server = Server(a.backend, folder)
    site = make_site(a.backend, folder, url=server.url)
    try:
        soak = Soak(a, site, server)
        soak.run()
        f, r = soak.report()
        print_report(f, r)
        if a.json:
            Path(a.json).write_text(json.dumps(r, indent=2) + "\n")
        bound = f.unreleased_on_dead + f.lease_lost
        ok = not (f.lost or f.unexpected or f.stuck or f.overlap) and f.duplicates <= bound
        print("  verdict:    " + ("OK" if ok else "FAILED"))
        return 0 if ok else 1
    finally:
        site.close()
        server.cleanup()
        if a.keep:
            print(f"  kept:       {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
