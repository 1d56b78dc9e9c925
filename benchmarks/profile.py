"""Where a Conveyor worker's time goes, per job, on each backend.

    python -m benchmarks.profile                # default config (prefetch "auto"), every backend
    python -m benchmarks.profile --prefetch 1   # one job per claim
    python -m benchmarks.profile --ref HEAD     # the package as committed

Queues N no-op jobs, then runs the real worker loop (`Runtime.drain`, which builds
the same `Worker` as `Runtime.start`) under cProfile in this process. Reports, per
job: wall time without the profiler; self time grouped by where it is spent
(waiting on the server, the driver, SQLAlchemy, the codec, the core, ...); calls per
job of the operations that cost round trips or commits; and the top functions.
Writes `benchmarks/results/profile.md` (or `profile-prefetchK.md`).

cProfile slows pure-Python code more than C calls and waits, so its shares overstate
Python work a little; the unprofiled wall time per job is the figure to trust.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from pathlib import Path
from typing import Any

from . import meta, workers
from .systems import ConveyorInstance, Env

RESULTS = Path(__file__).resolve().parent / "results"

#: (label, test on (file, function name)) for grouping self time; first match wins.
GROUPS: list[tuple[str, Any]] = [
    (
        "waiting on the server (socket / poll / sqlite3 C calls)",
        lambda f, n: (
            f == "~"
            and any(
                k in n
                for k in (
                    "recv",
                    "sendall",
                    "send'",
                    "poll",
                    "select",
                    "wait",
                    "sqlite3",
                    "_psycopg",
                )
            )
        ),
    ),
    ("psycopg (Python side, incl. its wait loop for replies)", lambda f, n: "/psycopg/" in f),
    ("redis-py (Python side)", lambda f, n: "/redis/" in f),
    ("SQLAlchemy", lambda f, n: "/sqlalchemy/" in f),
    (
        "codec: JSON + encode/decode",
        lambda f, n: (
            "/cattrs/" in f
            or f.endswith(("json/encoder.py", "json/decoder.py"))
            or "/shell/codec/" in f
            or "<cattrs" in f
            or (f == "~" and "json" in n)
        ),
    ),
    (
        "conveyor.core (decide, transitions, records)",
        lambda f, n: (
            "/core/" in f or "/attr/" in f or "/attrs/" in f or "<attrs" in f or "/returns/" in f
        ),
    ),
    ("conveyor.shell (worker, executor, adapters)", lambda f, n: "/shell/" in f),
    ("threading / locks", lambda f, n: "threading.py" in f or (f == "~" and "lock" in n)),
    ("uuid / datetime / other stdlib", lambda f, n: "uuid.py" in f or f == "~"),
]

#: Operations counted per job: (label, test on (file, function name)).
COUNTED: list[tuple[str, Any]] = [
    (
        "redis round trips (send_packed_command)",
        lambda f, n: "/redis/" in f and n == "send_packed_command",
    ),
    (
        "SQL statements (Connection._execute_context)",
        lambda f, n: "/sqlalchemy/" in f and n == "_execute_context",
    ),
    (
        "SQL commits (Transaction commit)",
        lambda f, n: "/sqlalchemy/engine/base.py" in f and n == "_commit_impl",
    ),
    (
        "SQL connection checkouts (Engine.connect)",
        lambda f, n: "/sqlalchemy/engine/base.py" in f and n == "connect",
    ),
    ("SQL statement compiles", lambda f, n: "/sqlalchemy/sql/compiler.py" in f and n == "__init__"),
    ("codec.decode", lambda f, n: f.endswith("/codec.py") and n == "decode"),
    ("codec.encode", lambda f, n: f.endswith("/codec.py") and n == "encode"),
    # The encoder's and decoder's own methods: `json.dumps`/`loads` call them too.
    ("JSON documents written", lambda f, n: f.endswith("json/encoder.py") and n == "encode"),
    ("JSON documents read", lambda f, n: f.endswith("json/decoder.py") and n == "decode"),
    ("uuid4", lambda f, n: f.endswith("uuid.py") and n == "uuid4"),
    (
        "claim tokens made (fresh_token)",
        lambda f, n: f.endswith("/tokens.py") and n == "fresh_token",
    ),
    (
        "Job records built (Job.__init__)",
        lambda f, n: "<attrs generated methods conveyor.core.job.Job>" in f and n == "__init__",
    ),
    ("attrs.evolve", lambda f, n: f.endswith("attr/_make.py") and n == "evolve"),
    ("threads started", lambda f, n: f.endswith("threading.py") and n == "start"),
    ("executor.carry_out", lambda f, n: f.endswith("/executor.py") and n == "carry_out"),
]


def _queue(inst: ConveyorInstance, n: int) -> None:
    inst.reset()
    inst.next_i = 0
    inst.fill(n)


def _runtime(inst: ConveyorInstance, prefetch: int | str) -> Any:
    config = {**inst.config, "workers": {**inst.config["workers"]}}
    config["workers"]["prefetch"] = prefetch
    if inst.backend == "memory":
        return inst.rt  # the queued jobs live in this runtime
    return workers.conveyor_runtime(config, workers.plain_noop)


def profile_backend(env: Env, backend: str, n: int, prefetch: int | str) -> dict[str, Any]:
    inst = ConveyorInstance(env, f"profile-{backend}", backend, handler=workers.plain_noop)
    if backend == "memory":
        inst.close()
        inst.config["workers"]["prefetch"] = prefetch
        inst.open()
    # Wall time without the profiler.
    _queue(inst, n)
    rt = _runtime(inst, prefetch)
    start = time.perf_counter()
    stats = rt.drain(timeout_s=600)
    wall = time.perf_counter() - start
    done = stats.processed
    if rt is not inst.rt:
        rt.close()
    # The same under cProfile.
    _queue(inst, n)
    rt = _runtime(inst, prefetch)
    prof = cProfile.Profile()
    prof.enable()
    pstats_run = rt.drain(timeout_s=600)
    prof.disable()
    if rt is not inst.rt:
        rt.close()
    inst.close()
    if pstats_run.completed != pstats_run.processed or stats.completed != stats.processed:
        raise RuntimeError(f"{backend}: not every job completed: {stats} / {pstats_run}")
    st = pstats.Stats(prof)
    raw: dict[Any, Any] = st.stats  # type: ignore[attr-defined]
    jobs = max(pstats_run.processed, 1)
    total = sum(v[2] for v in raw.values())
    groups: dict[str, float] = {}
    counted: dict[str, int] = {}
    rows = []
    for (file, _line, name), (_cc, calls, tottime, cumtime, _callers) in raw.items():
        for label, test in GROUPS:
            if test(file, name):
                groups[label] = groups.get(label, 0.0) + tottime
                break
        else:
            groups["other"] = groups.get("other", 0.0) + tottime
        for label, test in COUNTED:
            if test(file, name):
                counted[label] = counted.get(label, 0) + calls
        rows.append((tottime, calls, cumtime, _short(file), name))
    rows.sort(reverse=True)
    return {
        "backend": backend,
        "jobs": done,
        "wall_us_per_job": wall / max(done, 1) * 1e6,
        "jobs_per_s": done / wall if wall else 0.0,
        "profiled_us_per_job": total / jobs * 1e6,
        # Unlike the times, this count does not move with the machine's load.
        "calls_per_job": sum(v[1] for v in raw.values()) / jobs,
        "groups": {k: v / jobs * 1e6 for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
        "counted": {k: v / jobs for k, v in counted.items()},
        "top": [
            {
                "self_us": t / jobs * 1e6,
                "calls": c / jobs,
                "cum_us": cu / jobs * 1e6,
                "where": f"{f}:{nm}",
            }
            for t, c, cu, f, nm in rows[:18]
        ],
    }


def _short(file: str) -> str:
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def render(results: list[dict[str, Any]], prefetch: int | str, n: int, info: dict[str, Any]) -> str:
    lines = [
        f"# Conveyor worker profile (prefetch {prefetch}, {n:,} no-op jobs per backend)",
        "",
        f"git {info['git']['commit']}"
        + (" with uncommitted src changes" if info["git"]["src_uncommitted"] else "")
        + f", Python {info['versions']['python']}, {info['machine']['cores']} cores. "
        "The real worker loop (`Runtime.drain`) under cProfile, in one process; per-job "
        "figures are totals divided by jobs processed.",
        "",
        "| backend | jobs/s (no profiler) | µs/job (no profiler) | µs/job (profiled) "
        "| Python calls/job |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['backend']} | {r['jobs_per_s']:,.0f} | {r['wall_us_per_job']:,.0f} | "
            f"{r['profiled_us_per_job']:,.0f} | {r['calls_per_job']:,.0f} |"
        )
    lines.append("")
    for r in results:
        lines += [f"## {r['backend']}", "", "Self time per job, by where it is spent:", ""]
        lines += ["| where | µs/job | share |", "|---|---|---|"]
        total = sum(r["groups"].values()) or 1
        for k, v in r["groups"].items():
            lines.append(f"| {k} | {v:,.1f} | {v / total:.0%} |")
        lines += ["", "Operations per job:", "", "| operation | per job |", "|---|---|"]
        for k, v in r["counted"].items():
            lines.append(f"| {k} | {v:.2f} |")
        lines += ["", "Top functions by self time:", ""]
        lines += ["| function | self µs/job | calls/job | cumulative µs/job |", "|---|---|---|---|"]
        for t in r["top"]:
            lines.append(
                f"| `{t['where']}` | {t['self_us']:,.1f} | {t['calls']:.2f} | {t['cum_us']:,.1f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument(
        "--prefetch",
        type=lambda v: v if v == "auto" else int(v),
        default="auto",
        help='workers.prefetch: "auto" (the default) or a number',
    )
    parser.add_argument(
        "--backends", nargs="*", default=["memory", "sqlite", "postgresql", "redis"]
    )
    parser.add_argument("--ref", metavar="GIT_REF")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.ref:
        meta.use_ref(args.ref)
    env = Env()
    try:
        results = []
        for backend in args.backends:
            print(f"profiling {backend} ...", flush=True)
            results.append(profile_backend(env, backend, args.jobs, args.prefetch))
        info = {
            "git": meta.git_state(),
            "versions": meta.versions(),
            "machine": {"cores": os.cpu_count()},
        }
    finally:
        env.cleanup()
    name = "profile.md" if args.prefetch == "auto" else f"profile-prefetch{args.prefetch}.md"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / name).write_text(render(results, args.prefetch, args.jobs, info))
    print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
