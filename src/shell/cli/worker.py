"""`conveyor worker`: run the config's worker pools until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from ...core import (
    DEFAULT_STALL_LEASES,
    FieldError,
    RecyclePolicy,
    StallPolicy,
    ValidationError,
)
from ...core.validation import check_name
from ..config import Config, load_config
from ..notices import notice
from ..parent_death import die_with_parent
from .guards import check_cli_config
from .runtime import check, command_runtime, import_extra
from .supervisor import MAX_PROCESSES, PROCESS_INDEX_ENV, SUPERVISOR_PID_ENV, supervise

#: Beyond the wait for the server, what a supervised copy may take to start (imports,
#: handlers, the first claim) before its supervisor counts it stalled.
STARTUP_MARGIN_S = 30.0


def add_worker_command(sub: Any) -> None:
    """The `worker` command, on the CLI's subparsers `sub`."""
    w = sub.add_parser("worker", help="run the worker pools from the config until SIGTERM/SIGINT")
    w.add_argument(
        "--queue",
        "-q",
        action="append",
        dest="queues",
        help="poll this queue (repeatable; overrides workers.queues)",
    )
    w.add_argument(
        "--concurrency", "-n", type=int, help="workers per queue (overrides workers.count)"
    )
    w.add_argument(
        "--processes",
        type=int,
        default=None,
        help="run N worker processes under one supervisor (default 1; see docs/workers.md)",
    )
    w.add_argument(
        "--grace", type=float, default=None, help="seconds to let in-flight jobs finish on stop"
    )
    w.add_argument(
        "--drain-timeout",
        type=float,
        default=None,
        help="on SIGTERM/SIGINT, let running jobs finish for this many seconds, then hand "
        "them back to the queue at once (instead of --grace, which leaves them to their "
        "leases); set it below the supervisor's kill deadline",
    )
    w.add_argument(
        "--max-jobs-per-child",
        type=int,
        default=None,
        metavar="N",
        help="with --processes: a worker process that has done N jobs stops gracefully and "
        "a fresh one takes its place",
    )
    w.add_argument(
        "--max-memory-per-child",
        type=float,
        default=None,
        metavar="MB",
        help="with --processes: a worker process whose resident memory reaches MB stops "
        "gracefully and a fresh one takes its place",
    )
    w.add_argument(
        "--stall-leases",
        type=int,
        default=None,
        metavar="N",
        help="a worker whose loop makes no progress for N leases is unhealthy: /healthz "
        "answers 503 and, with --processes, the supervisor replaces it (overrides "
        f"workers.stall_leases, default {DEFAULT_STALL_LEASES}; 0 turns the watchdog off)",
    )
    w.add_argument(
        "--startup-timeout",
        type=float,
        default=None,
        help="seconds to wait for an unreachable server at start (overrides startup_timeout_ms)",
    )
    w.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics at http://ADDR:PORT/metrics (needs the metrics extra)",
    )
    w.add_argument(
        "--metrics-addr", default="0.0.0.0", help="address for --metrics-port (default 0.0.0.0)"
    )
    w.add_argument(
        "--tracing",
        action="store_true",
        help="OpenTelemetry spans for each job, to the global tracer provider (tracing extra)",
    )
    w.set_defaults(func=cmd_worker)


def _last_port_problem(port: int | None, processes: int | None) -> FieldError | None:
    """Copy i of `--processes N` serves its metrics on P + i: the last must be a port."""
    if not port or not processes or port > 65535 or port + processes - 1 <= 65535:
        return None
    last = port + processes - 1
    reason = f"with --processes {processes}, copy {processes - 1} would get port {last}"
    return FieldError("--metrics-port", f"{reason}; give at most {65536 - processes}")


def cmd_worker(args: argparse.Namespace) -> int:
    check(
        None
        if args.processes is None or args.processes >= 1
        else FieldError("--processes", f"must be >= 1, got {args.processes}"),
        None
        if args.processes is None or args.processes <= MAX_PROCESSES
        else FieldError("--processes", f"must be at most {MAX_PROCESSES}, got {args.processes}"),
        *(check_name("--queue", name) for name in args.queues or ()),
        None
        if args.concurrency is None or args.concurrency >= 0
        else FieldError("--concurrency", f"must be >= 0, got {args.concurrency}"),
        None
        if args.grace is None or (math.isfinite(args.grace) and args.grace >= 0)
        else FieldError("--grace", f"must be a finite number of seconds >= 0, got {args.grace}"),
        None
        if args.drain_timeout is None
        or (math.isfinite(args.drain_timeout) and args.drain_timeout >= 0)
        else FieldError(
            "--drain-timeout", f"must be a finite number of seconds >= 0, got {args.drain_timeout}"
        ),
        None
        if args.drain_timeout is None or args.grace is None
        else FieldError("--drain-timeout", "give --drain-timeout or --grace, not both"),
        None
        if args.metrics_port is None or 0 <= args.metrics_port <= 65535
        else FieldError("--metrics-port", f"must be a port, 0 to 65535, got {args.metrics_port}"),
        _last_port_problem(args.metrics_port, args.processes),
        None
        if args.stall_leases is None or args.stall_leases >= 0
        else FieldError("--stall-leases", f"must be a whole number >= 0, got {args.stall_leases}"),
        None
        if args.startup_timeout is None
        or (math.isfinite(args.startup_timeout) and args.startup_timeout >= 0)
        else FieldError(
            "--startup-timeout",
            f"must be a finite number of seconds >= 0, got {args.startup_timeout}",
        ),
    )
    supervised = args.processes is not None or PROCESS_INDEX_ENV in os.environ
    check(
        None
        if args.max_jobs_per_child is None or args.max_jobs_per_child >= 1
        else FieldError("--max-jobs-per-child", f"must be >= 1, got {args.max_jobs_per_child}"),
        None
        if args.max_memory_per_child is None
        or (math.isfinite(args.max_memory_per_child) and args.max_memory_per_child > 0)
        else FieldError(
            "--max-memory-per-child",
            f"must be a finite number of MB > 0, got {args.max_memory_per_child}",
        ),
        *(
            FieldError(flag, "needs --processes N: the supervisor starts the fresh process")
            for flag, value in [
                ("--max-jobs-per-child", args.max_jobs_per_child),
                ("--max-memory-per-child", args.max_memory_per_child),
            ]
            if value is not None and not supervised
        ),
    )
    recycles = args.max_jobs_per_child is not None or args.max_memory_per_child is not None
    if args.processes is not None and (args.processes > 1 or recycles):
        config = load_config(args.config)
        check_cli_config(config)  # once here, not in each copy
        stall = _stall_policy(args, config)
        # A copy not yet marked live may be waiting for the server, as long as allowed.
        waits = (
            config.startup_timeout_ms / 1000
            if args.startup_timeout is None
            else args.startup_timeout
        )
        return supervise(args.raw_argv, args.processes, stall, waits + STARTUP_MARGIN_S)
    if not _tied_to_supervisor():
        notice("conveyor worker: its supervisor is gone; not starting")
        return 1
    runtime = command_runtime(args, args.startup_timeout)
    if args.queues:
        import attrs

        runtime.config = attrs.evolve(
            runtime.config, workers=attrs.evolve(runtime.config.workers, queues=tuple(args.queues))
        )
    if args.concurrency is not None:
        import attrs

        runtime.config = attrs.evolve(
            runtime.config, workers=attrs.evolve(runtime.config.workers, count=args.concurrency)
        )
    server = None
    from ..health import ProcessHealth
    from ..liveness import LivenessMark

    watchdog = ProcessHealth(
        runtime, _stall_policy(args, runtime.config), LivenessMark.from_env()
    )
    try:
        if args.tracing:
            import_extra("..tracing", "opentelemetry", "tracing").instrument(runtime)
        if args.metrics_port is not None:
            metrics = import_extra("..metrics", "prometheus_client", "metrics")
            exporter = metrics.instrument(runtime)
            port, addr = args.metrics_port, args.metrics_addr
            try:
                server = metrics.serve(exporter, port, addr, health=watchdog.now)
            except OSError as exc:
                # A port in use, or an address not of this host: the flag to change.
                why = exc.strerror or str(exc)
                raise ValidationError.of(
                    "--metrics-port", f"cannot listen on {addr}:{port}: {why}"
                ) from None
    except BaseException:
        runtime.close()
        raise
    from ..worker.signals import StopSignals, run_until_stopped

    # Read, then taken out: a `conveyor` command a job runs is not a copy.
    copy = os.environ.pop(PROCESS_INDEX_ENV, None)
    name = f"conveyor worker process {copy}" if copy else "conveyor worker"
    stops = StopSignals(name).install(supervised=bool(copy))
    w = runtime.config.workers
    notice(
        f"{name} {runtime.worker_id}: provider={runtime.config.provider} "
        f"queues={','.join(w.queues)} workers per queue={w.count} "
        f"handlers={','.join(sorted(runtime.registry.job_types())) or '(none)'}"
    )
    if server is not None:
        host, port = server.address
        notice(f"conveyor worker: metrics at http://{host}:{port}/metrics (/healthz, /readyz)")
    recycling = None
    policy = RecyclePolicy(args.max_jobs_per_child, args.max_memory_per_child)
    if policy.bounded:
        from ..worker.recycling import Recycling

        recycling = Recycling(policy)
    try:
        return run_until_stopped(
            runtime, stops, args.grace, args.drain_timeout, recycling, watchdog
        )
    finally:
        if server is not None:
            server.close()


def _tied_to_supervisor() -> bool:
    """In a copy of `--processes N`: be stopped gracefully when the supervisor dies
    (`SUPERVISOR_GONE`), so no copy runs on that nobody watches; False when it has
    died already. Outside a copy, or where no such signal exists: True."""
    from ..worker.signals import SUPERVISOR_GONE

    parent = os.environ.pop(SUPERVISOR_PID_ENV, "")
    if not parent.isdigit() or SUPERVISOR_GONE is None:
        return True
    return die_with_parent(int(parent), SUPERVISOR_GONE)


def _stall_policy(args: argparse.Namespace, config: Config) -> StallPolicy:
    """The watchdog's policy: `--stall-leases`, else `workers.stall_leases`, leases
    of the config's `lease_ms`."""
    leases = config.workers.stall_leases if args.stall_leases is None else args.stall_leases
    return StallPolicy(lease_ms=config.lease_ms, stall_leases=leases)
