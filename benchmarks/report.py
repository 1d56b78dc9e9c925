"""The Markdown report, the chart, and the performance targets, from one result document."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from .limits import LIMIT_LABELS
from .systems import PREFETCH

BACKENDS = ("memory", "sqlite", "postgresql", "redis")
#: The server limit a job's cost on each backend is bounded by.
LIMIT_FOR = {
    "redis": "redis_get_rt",
    "postgresql": "pg_update_commits_1",
    "sqlite": "sqlite_update_commits",
}
LIMIT_SHORT = {
    "redis_get_rt": "GET round trips, 1 connection",
    "pg_update_commits_1": "1-row UPDATE commits, 1 connection",
    "sqlite_update_commits": "1-row UPDATE commits",
}
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
X, DASH = "\u00d7", "\u2013"  # the multiplication sign and the en dash of the report


class View:
    """Read figures out of a result document."""

    def __init__(self, result: dict[str, Any]) -> None:
        self.r = result
        self.figures: dict[str, dict[str, dict[str, float]]] = result["figures"]
        self.systems: dict[str, dict[str, Any]] = result["systems"]

    def get(self, system: str, figure: str) -> float | None:
        f = self.figures.get(system, {}).get(figure)
        return None if f is None else f["median"]

    def cell(self, system: str, figure: str, digits: int | None = None) -> str:
        f = self.figures.get(system, {}).get(figure)
        if f is None:
            return "—"
        med, lo, hi = f["median"], f["min"], f["max"]
        if f["n"] == 1 or lo == hi:
            return num(med, digits)
        return f"{num(med, digits)} ({num(lo, digits)}{DASH}{num(hi, digits)})"

    def of_backend(self, backend: str, conveyor: bool) -> list[str]:
        return [
            name
            for name, s in self.systems.items()
            if s["backend"] == backend and (s["product"] == "Conveyor") == conveyor
        ]

    def best_peer(self, backend: str, figure: str, low: bool = False) -> tuple[str, float] | None:
        found = [
            (v, name)
            for name in self.of_backend(backend, conveyor=False)
            if (v := self.get(name, figure)) is not None
        ]
        if not found:
            return None
        v, name = (min if low else max)(found)
        return name, v

    def limit(self, key: str) -> float | None:
        return self.get("limit", key)


def num(value: float | None, digits: int | None = None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if digits is not None:
        return f"{value:,.{digits}f}"
    a = abs(value)
    if a >= 100:
        return f"{value:,.0f}"
    if a >= 10:
        return f"{value:.1f}"
    if a >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}{X}"


def label(v: View, name: str) -> str:
    s = v.systems[name]
    text = f"{s['product']} {s['backend']}"
    if s["variant"] != "default":
        text += f" ({s['variant']})"
    return f"**{text}**" if s["product"] == "Conveyor" else text


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return [*out, ""]


def _ordered(v: View) -> list[str]:
    def key(name: str) -> tuple[int, int, str]:
        s = v.systems[name]
        return (BACKENDS.index(s["backend"]), s["product"] != "Conveyor", name)

    return sorted(v.systems, key=key)


# ---- the performance targets ---------------------------------------------------------


def targets(v: View) -> list[tuple[str, str, str, bool | None]]:
    """(target, measured, verdict text, met) for each performance target."""
    out: list[tuple[str, str, str, bool | None]] = []

    def at_least(name: str, have: float | None, need: float | None, what: str) -> None:
        if have is None or need is None or need == 0:
            out.append((name, what, "not measured", None))
            return
        met = have >= need
        verdict = "met" if met else f"missed: {have / need:.2f}{X} of the target"
        out.append((name, what, verdict, met))

    def at_most(name: str, have: float | None, bound: float, what: str) -> None:
        if have is None:
            out.append((name, what, "not measured", None))
            return
        met = have <= bound
        verdict = "met" if met else f"missed: {have / bound:.1f}{X} the bound"
        out.append((name, what, verdict, met))

    def configs(backend: str) -> list[tuple[str, str]]:
        """Conveyor's default and batched-claim configurations that ran on `backend`."""
        names = [
            (f"conveyor-{backend}", "default"),
            (f"conveyor-{backend}-prefetch{PREFETCH}", f"prefetch {PREFETCH}"),
        ]
        return [(n, text) for n, text in names if n in v.systems]

    def best_default(backend: str) -> tuple[str, float] | None:
        """The fastest peer on `backend` in its default configuration (the variants
        that run every phase are the defaults)."""
        found = [
            (have, name)
            for name in v.of_backend(backend, conveyor=False)
            if len(v.systems[name]["phases"]) > 1
            and (have := v.get(name, "processed_1p")) is not None
        ]
        return None if not found else (max(found)[1], max(found)[0])

    for backend in ("sqlite", "postgresql", "redis"):
        have = v.get(f"conveyor-{backend}", "processed_1p")
        peer = best_default(backend)
        if peer:
            at_least(
                f"Default, 1 process, {backend}: ≥ 1.0{X} the best peer's default",
                have,
                peer[1],
                f"{num(have)} vs {num(peer[1])} ({peer[0]})",
            )
    tuned = {
        "redis": (2.0, v.best_peer("redis", "processed_1p")),
        "postgresql": (
            1.0,
            ("pgqueuer-postgresql-b100", v.get("pgqueuer-postgresql-b100", "processed_1p")),
        ),
        "sqlite": (1.5, v.best_peer("sqlite", "processed_1p")),
    }
    for backend, (factor, peer) in tuned.items():
        for c, how in configs(backend):
            have = v.get(c, "processed_1p")
            if peer and peer[1] is not None:
                at_least(
                    f"Tuned, {backend} ({how}): ≥ {factor:g}{X} {peer[0]}",
                    have,
                    factor * peer[1],
                    f"{num(have)} vs {factor:g} {X} {num(peer[1])}",
                )
    for c, how in configs("redis"):
        cmds = v.get(c, "redis_commands_per_job")
        at_most(
            f"Redis ({how}): ≤ 3 commands per job",
            cmds,
            3,
            f"{num(cmds)} commands ({num(v.get(c, 'round_trips_per_job'))} round trips, "
            f"{num(v.get(c, 'redis_scripts_per_job'))} scripts)",
        )
    for backend, bound in (("redis", 1.0), ("sqlite", 2.0), ("postgresql", 2.0)):
        p50 = v.get(f"conveyor-{backend}", "latency_p50_ms")
        at_most(f"Pickup p50 on {backend} ≤ {bound:g} ms", p50, bound, f"{num(p50)} ms")

    wal = v.get("conveyor-postgresql", "pg_wal_per_job")
    peer_wal = v.get("pgqueuer-postgresql", "pg_wal_per_job")
    at_most(
        "PostgreSQL: WAL bytes per job ≤ pgqueuer's",
        wal if peer_wal is not None else None,
        peer_wal or 0.0,
        f"{num(wal, 0)} vs {num(peer_wal, 0)} bytes (enqueue one by one, then processed)",
    )
    have = v.get("conveyor-postgresql", "enqueue_bulk")
    peer = v.get("pgqueuer-postgresql", "enqueue_bulk")
    at_least(
        "Enqueue: bulk on PostgreSQL ≥ pgqueuer's",
        have,
        peer,
        f"{num(have)} vs {num(peer)}",
    )
    for backend in ("sqlite", "postgresql", "redis"):
        have = v.get(f"conveyor-{backend}", "enqueue_single")
        best = v.best_peer(backend, "enqueue_single")
        if best:
            at_least(
                f"Enqueue: single on {backend} ≥ best peer",
                have,
                best[1],
                f"{num(have)} vs {num(best[1])} ({best[0]})",
            )
    for c, how in configs("memory"):
        have = v.get(c, "processed_1p")
        at_least(f"Memory ({how}): ≥ 50,000 jobs/s", have, 50_000, f"{num(have)}")
    for backend in BACKENDS:
        r = v.get(f"conveyor-{backend}", "depth_ratio")
        at_least(
            f"Depth: {backend} deep ≥ 0.8{X} shallow",
            r,
            0.8,
            f"{num(r)}{X}",
        )
    return out


# ---- Markdown ----------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    v = View(result)
    m = result["meta"]
    sizes = m["sizes"]
    ver = m["versions"]
    mach = m["machine"]
    lines = [
        f"# Benchmark report ({m['mode']} run, {m['started'][:10]})",
        "",
        f"*Machine*: {mach['cores']} cores ({mach['cpu']}), {mach['memory_gib']} GiB, "
        f"{mach['os']}. *Run*: {m['started']}, {m['duration_s'] / 60:.1f} min, "
        f"{sizes['rounds']} rounds, alternating.  ",
        f"*Versions*: Conveyor {ver['conveyor']} (git {m['git']['commit']}"
        + (", with uncommitted src changes" if m["git"]["src_uncommitted"] else "")
        + f"), Python {ver['python']}, Redis {ver['redis-server']}, PostgreSQL "
        f"{ver['postgresql']}, SQLite {ver['sqlite']}; redis-py {ver['redis']}, psycopg "
        f"{ver['psycopg']}, SQLAlchemy {ver['sqlalchemy']}; Huey {ver['huey']}, Dramatiq "
        f"{ver['dramatiq']}, Procrastinate {ver['procrastinate']}, pgqueuer {ver['pgqueuer']}.  ",
        f"*Servers*: Redis AOF {m['servers']['redis']['appendonly']} "
        f"(appendfsync {m['servers']['redis']['appendfsync']}); PostgreSQL "
        + ", ".join(f"{k}={val}" for k, val in m["servers"]["postgresql"].items())
        + "; SQLite (WAL) at `synchronous` FULL, an fsync per commit (each product's "
        "default), and NORMAL in `conveyor-sqlite-normal` and `huey-sqlite-normal`.  ",
        f"*Sizes*: {sizes['jobs']:,} no-op jobs per throughput measurement; "
        f"{sizes['latency_jobs']} jobs 20 ms apart per latency measurement; depth "
        f"{sizes['depth_small']:,} vs {sizes['depth_large']:,} queued, "
        f"{sizes['depth_measured']:,} jobs processed in each."
        + (
            " *Quick mode: smaller sizes than the full run; a smoke test, not figures to quote.*"
            if m["mode"] == "quick"
            else ""
        ),
        "",
        f"Each cell: median of the rounds (min{DASH}max). Conveyor in **bold**. One worker "
        "process = one Python process running the system's own worker loop.",
        "",
        "## Conveyor against its best peer and the server's limit",
        "",
    ]
    rows = []
    for backend in BACKENDS:
        best = v.best_peer(backend, "processed_1p")
        lim_key = LIMIT_FOR.get(backend)
        lim = v.limit(lim_key) if lim_key else None
        for c in (f"conveyor-{backend}", f"conveyor-{backend}-prefetch{PREFETCH}"):
            if c not in v.systems:
                continue
            have = v.get(c, "processed_1p")
            if backend == "redis":
                cost = (
                    f"{num(v.get(c, 'round_trips_per_job'))} round trips, "
                    f"{num(v.get(c, 'redis_commands_per_job'))} commands"
                )
            elif backend == "postgresql":
                cost = (
                    f"{num(v.get(c, 'pg_commits_per_job'))} commits, "
                    f"{num(v.get(c, 'pg_rows_per_job'))} rows"
                )
            else:
                cost = "—"
            rows.append(
                [
                    f"{backend}, {v.systems[c]['variant']}",
                    v.cell(c, "processed_1p"),
                    f"{num(best[1])} ({label(v, best[0])})" if best else "—",
                    ratio(have, best[1] if best else None),
                    f"{num(lim)} ({LIMIT_SHORT[lim_key]})" if lim_key else "—",
                    ratio(have, lim),
                    cost,
                ]
            )
    lines += _table(
        [
            "backend, Conveyor config",
            "Conveyor jobs/s (1 process)",
            "best peer jobs/s",
            "Conveyor ÷ best peer",
            "server limit /s",
            "Conveyor ÷ limit",
            "Conveyor's server work per job",
        ],
        rows,
    )
    lines += ["## Throughput and enqueue", ""]
    rows = [
        [
            label(v, name),
            v.cell(name, "enqueue_single"),
            v.cell(name, "enqueue_bulk"),
            v.cell(name, "processed_1p"),
            v.cell(name, "processed_2p"),
            v.cell(name, "rss_mib"),
        ]
        for name in _ordered(v)
    ]
    lines += _table(
        [
            "system",
            "enqueue/s, one by one",
            "enqueue/s, bulk",
            "processed/s, 1 process",
            "processed/s, 2 processes",
            "worker peak RSS MiB",
        ],
        rows,
    )
    lines += ["## Pickup latency (idle worker, jobs enqueued 20 ms apart)", ""]
    rows = [
        [
            label(v, name),
            v.cell(name, "latency_p50_ms"),
            v.cell(name, "latency_p99_ms"),
            v.cell(name, "latency_max_ms"),
        ]
        for name in _ordered(v)
        if "latency" in v.systems[name]["phases"]
    ]
    lines += _table(["system", "p50 ms", "p99 ms", "max ms"], rows)
    lines += [
        f"## Cost growth with depth ({sizes['depth_small']:,} vs {sizes['depth_large']:,} queued)",
        "",
    ]
    rows = [
        [
            label(v, name),
            v.cell(name, "depth_small"),
            v.cell(name, "depth_large"),
            v.cell(name, "depth_ratio"),
        ]
        for name in _ordered(v)
        if "depth" in v.systems[name]["phases"]
    ]
    lines += _table(
        [
            "system",
            f"jobs/s at {sizes['depth_small']:,}",
            f"jobs/s at {sizes['depth_large']:,}",
            "deep ÷ shallow",
        ],
        rows,
    )
    lines += [
        "## Server work per job (1 worker process)",
        "",
        "Redis (INFO commandstats "
        "deltas, commands inside scripts included; round trips counted in redis-py):",
        "",
    ]
    rows = [
        [
            label(v, name),
            v.cell(name, "redis_commands_per_job"),
            v.cell(name, "redis_scripts_per_job"),
            v.cell(name, "round_trips_per_job"),
            v.cell(name, "bytes_per_job", 0),
        ]
        for name in _ordered(v)
        if v.systems[name]["backend"] == "redis"
    ]
    lines += _table(
        ["system", "commands/job", "scripts/job", "round trips/job", "bytes per queued job"],
        rows,
    )
    lines += [
        "PostgreSQL (pg_stat_database and pg_stat_user_tables deltas; bytes from "
        "pg_total_relation_size; WAL bytes from `pg_current_wal_lsn()` before and after, "
        "the measurement starting right after a CHECKPOINT):",
        "",
    ]
    rows = [
        [
            label(v, name),
            v.cell(name, "pg_commits_per_job"),
            v.cell(name, "pg_rows_per_job"),
            "/".join(num(v.get(name, f"pg_{k}_per_job")) for k in ("ins", "upd", "del")),
            v.cell(name, "bytes_per_job", 0),
            v.cell(name, "pg_wal_enqueue_single_per_job", 0),
            v.cell(name, "pg_wal_enqueue_bulk_per_job", 0),
            v.cell(name, "pg_wal_process_per_job", 0),
            v.cell(name, "pg_wal_per_job", 0),
        ]
        for name in _ordered(v)
        if v.systems[name]["backend"] == "postgresql"
    ]
    lines += _table(
        [
            "system",
            "commits/job",
            "rows/job",
            "ins/upd/del",
            "bytes per queued job",
            "WAL/job, enqueue one by one",
            "WAL/job, bulk enqueue",
            "WAL/job, processing",
            "WAL/job, enqueue + processing",
        ],
        rows,
    )
    lines += ["## Server limits (same client libraries)", ""]
    rows = [
        [text, v.cell("limit", key)]
        for key, (text, _) in LIMIT_LABELS.items()
        if v.get("limit", key) is not None
    ]
    lines += _table(["limit", "per second"], rows)
    lines += ["## Targets", ""]
    rows = [
        [name, measured, ("✅ " if met else "❌ " if met is False else "") + verdict]
        for name, measured, verdict, met in targets(v)
    ]
    lines += _table(["target", "measured", "verdict"], rows)
    problems = result.get("problems") or {}
    if problems:
        lines += ["## Peers that could not run here", ""]
        lines += [f"- {name}: `{text}`" for name, text in problems.items()]
        lines.append("")
    notes = result.get("notes") or {}
    sanity = [
        f"- {name}: {fig} = {num(f['max'])} (max over rounds)"
        for name, figs in result["figures"].items()
        for fig, f in figs.items()
        if fig.startswith(("duplicates_", "unfinished_"))
    ]
    if notes or sanity:
        lines += ["## Notes", ""]
        for name in _ordered(v):
            for text in notes.get(name, []):
                lines.append(f"- {name}: {text}")
        lines += sanity
        lines.append("")
    return "\n".join(lines)


def update_docs(path: Path, report_md: str) -> None:
    """Replace the block between the bench markers of `path` with `report_md`."""
    text = path.read_text() if path.exists() else f"{BEGIN}\n{END}\n"
    body = re.sub(r"^# ", "### ", report_md, flags=re.M)  # nest under the page's headings
    body = re.sub(r"^## ", "#### ", body, flags=re.M)
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    new = pattern.sub(lambda _: f"{BEGIN}\n{body}\n{END}", text)
    path.write_text(new)


# ---- the chart ---------------------------------------------------------------------

COLORS = {"memory": "#7f7f7f", "sqlite": "#2ca02c", "postgresql": "#1f77b4", "redis": "#d62728"}


def chart(result: dict[str, Any], path: Path) -> bool:
    """Processed/s (1 process) and pickup latency per system, as one PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _fallback_chart(result, path)
    v = View(result)
    names = [n for n in _ordered(v) if v.get(n, "processed_1p") is not None]
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.42 * len(names) + 2.2))
    _bars(axes[0], v, names, "processed_1p", "jobs/s, 1 worker process (log scale)")
    lat = [n for n in names if v.get(n, "latency_p50_ms") is not None]
    _bars(axes[1], v, lat, "latency_p50_ms", "pickup latency, ms: bars p50, dots p99 (log scale)")
    p99 = [v.get(n, "latency_p99_ms") for n in lat]
    axes[1].scatter(p99, list(range(len(lat)))[::-1], color="black", s=12, zorder=3)
    for ax, lims in ((axes[0], True), (axes[1], False)):
        if lims:
            for key, text in (
                ("redis_get_rt", "Redis RT limit"),
                ("pg_update_commits_1", "PG commit limit"),
            ):
                lim = v.limit(key)
                if lim:
                    ax.axvline(lim, color="k", ls=":", lw=1)
                    ax.text(
                        lim,
                        len(names) - 0.6,
                        text + " ",
                        fontsize=7,
                        rotation=90,
                        va="top",
                        ha="right",
                    )
    m = result["meta"]
    fig.suptitle(
        f"Conveyor benchmark, {m['mode']} run {m['started'][:10]}: "
        f"{m['machine']['cores']} cores, medians of {m['sizes']['rounds']} rounds "
        f"(bars: min{DASH}max)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _bars(ax: Any, v: View, names: list[str], figure: str, title: str) -> None:
    if not names:  # a run without this phase
        ax.set_axis_off()
        return
    ys = list(range(len(names)))[::-1]
    med = [v.figures[n][figure]["median"] for n in names]
    lo = [m - v.figures[n][figure]["min"] for n, m in zip(names, med, strict=True)]
    hi = [v.figures[n][figure]["max"] - m for n, m in zip(names, med, strict=True)]
    colors = [COLORS[v.systems[n]["backend"]] for n in names]
    bars = ax.barh(ys, med, xerr=[lo, hi], color=colors, capsize=2)
    for bar, n in zip(bars, names, strict=True):
        if v.systems[n]["product"] == "Conveyor":
            bar.set_edgecolor("black")
            bar.set_linewidth(1.8)
    ax.set_yticks(ys)
    ax.set_yticklabels([label(v, n).replace("**", "") for n in names], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(right=max(m + up for m, up in zip(med, hi, strict=True)) * 4)
    ax.set_title(title, fontsize=9)
    for y, m, up in zip(ys, med, hi, strict=True):
        ax.text((m + up) * 1.06, y, num(m), va="center", fontsize=7)
    ax.grid(axis="x", alpha=0.3)


def _fallback_chart(result: dict[str, Any], path: Path) -> bool:
    """Without matplotlib: a plain bar chart of processed/s written with zlib."""
    import struct
    import zlib

    v = View(result)
    names = [n for n in _ordered(v) if v.get(n, "processed_1p")]
    if not names:
        return False
    width, bar_h, gap = 600, 14, 6
    height = len(names) * (bar_h + gap) + gap
    top = max(math.log10(max(v.get(n, "processed_1p") or 1, 10)) for n in names)
    rgb: dict[str, tuple[int, int, int]] = {
        k: (int(c[1:3], 16), int(c[3:5], 16), int(c[5:7], 16)) for k, c in COLORS.items()
    }
    rows = [[(255, 255, 255)] * width for _ in range(height)]
    for k, n in enumerate(names):
        value: float = v.get(n, "processed_1p") or 1
        length = int((width - 10) * max(math.log10(max(value, 1)), 0) / top)
        y0 = gap + k * (bar_h + gap)
        color = rgb[v.systems[n]["backend"]]
        for y in range(y0, y0 + bar_h):
            for x in range(5, 5 + length):
                rows[y][x] = color
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    png = b"\x89PNG\r\n\x1a\n" + chunk(
        b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    )
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    path.write_bytes(png)
    return True
