"""The `conveyor` command line: worker, enqueue, status, dead, migrate, cron, dashboard, demo.

Every command reads the same config as `conveyor.build` (`--config FILE`, or
the nearest `conveyor.toml` / `[tool.conveyor]`, then `CONVEYOR_*` variables).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn
from uuid import UUID

from .. import __version__
from ..core import FieldError, ValidationError
from ..core.limit_report import LimitReport
from ..core.validation import as_delay, check_name, parse_job_id
from .cli_dead import add_dead_commands, run_dead
from .cli_guards import check_cli_config
from .config import Config, load_config
from .notices import notice, use_json
from .operator import OPERATOR_COMMANDS, without_handlers
from .outage import ServerUnreachable, is_outage
from .redact import BackendError, RedactingFilter, config_secrets, redact
from .runtime import Runtime, Status, build
from .terminal import TerminalFilter, escape, print_table

log = logging.getLogger("conveyor.cli")

#: Masks the config's URL passwords in every log line; filled once the config is read.
_REDACTING = RedactingFilter()
#: Shows control characters of stored text escaped in text log lines.
_ESCAPING = TerminalFilter()
#: The config the command read, to name its server and key when that server is down.
_LOADED: list[Config] = []


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line with exit status 2, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"conveyor: invalid input: {_printable(message)}\n")


def _printable(text: str) -> str:
    """`text` on one line: control characters and lone surrogates escaped."""
    return redact(escape(" ".join(text.splitlines())), _REDACTING.secrets)


def _check(*problems: FieldError | None) -> None:
    errors = [p for p in problems if p is not None]
    if errors:
        raise ValidationError(errors)


def _tenant(value: str | None) -> FieldError | None:
    return None if value is None else check_name("--tenant", value)


def _job_id(value: str) -> UUID:
    parsed = parse_job_id(value)
    if isinstance(parsed, FieldError):
        raise ValidationError((parsed,))
    return parsed


def _runtime(
    args: argparse.Namespace, startup_timeout_s: float | None = 0.0, *, reads_only: bool = False
) -> Runtime:
    """The runtime of the config. An operator's command tries the server once
    (`startup_timeout_s` 0); a worker waits for it (None: the config's timeout). A
    command that `reads_only` creates no database (see `cli_guards`)."""
    config = load_config(args.config)
    if args.command in OPERATOR_COMMANDS:
        config = without_handlers(config)
    check_cli_config(config, reads_only=reads_only)
    if startup_timeout_s is not None:
        import attrs

        config = attrs.evolve(config, startup_timeout_ms=round(startup_timeout_s * 1000))
    _REDACTING.secrets.update(config_secrets(config))
    _LOADED[:] = [config]
    return build(config)


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    print_table(headers, rows)  # stored text: every cell escaped (see `terminal`)


def render_status(status: Status) -> None:
    rows = []
    for q in status.queues:
        age = None if q.oldest_ready_age_s is None else f"{q.oldest_ready_age_s:.1f}s"
        flag = (
            "NO LIVE WORKER POLLS THIS QUEUE"
            if q.flagged
            else ("" if q.configured else "not in workers.queues")
        )
        rows.append((q.queue, q.ready, q.scheduled, q.in_flight, q.dead, age, len(q.pollers), flag))
    _print_table(
        ("queue", "ready", "scheduled", "in flight", "dead", "oldest ready", "pollers", "note"),
        rows,
    )
    print()
    for report in status.limits:
        render_limits(report)
        print()
    if status.workers:
        _print_table(
            ("worker", "host", "pid", "queues", "last seen"),
            [
                (
                    w.worker_id,
                    w.host,
                    w.pid,
                    ",".join(w.queues),
                    w.last_seen.isoformat(timespec="seconds"),
                )
                for w in status.workers
            ],
        )
    else:
        print("no live workers")


def render_limits(report: LimitReport) -> None:
    """One limited queue: each partition's share and what its next job waits for, the
    caps in use (per-partition ones only where used) and the rates' tokens."""
    kind = "fair shares" if report.fair else "oldest first"
    print(
        f"limits of queue {escape(report.queue)} ({kind}): {report.running} running,"
        f" {report.throttled} ready held back by a cap or a rate"
    )
    _print_table(
        ("partition", "weight", "share", "ready", "running", "next job"),
        [
            (
                p.label,
                f"{p.weight:g}",
                "-" if p.share is None else f"{p.share:.0%}",
                p.ready,
                p.running,
                p.waits or ("can start" if p.ready else "-"),
            )
            for p in report.partitions
        ]
        or [("(none)", "-", "-", 0, 0, "no ready or running job")],
    )
    caps = [c for c in report.caps if c.partition is None or c.in_use > 0]
    if caps:
        _print_table(
            ("cap", "partition", "in use", "note"),
            [
                (
                    c.label,
                    "-" if c.partition is None else (c.partition or "(default)"),
                    f"{c.in_use}/{c.max_running}",
                    "FULL" if c.full else "",
                )
                for c in caps
            ],
        )
    if report.rates:
        _print_table(
            ("rate", "partition", "tokens", "note"),
            [
                (
                    r.label,
                    "-" if r.partition is None else (r.partition or "(default)"),
                    f"{r.tokens:.1f}/{r.starts}",
                    "" if r.next_token_s is None else f"next token in {r.next_token_s:.1f}s",
                )
                for r in report.rates
            ],
        )


def cmd_worker(args: argparse.Namespace) -> int:
    _check(
        None
        if args.processes is None or args.processes >= 1
        else FieldError("--processes", f"must be >= 1, got {args.processes}"),
        *(check_name("--queue", name) for name in args.queues or ()),
        None
        if args.concurrency is None or args.concurrency >= 0
        else FieldError("--concurrency", f"must be >= 0, got {args.concurrency}"),
        None
        if args.grace is None or (math.isfinite(args.grace) and args.grace >= 0)
        else FieldError("--grace", f"must be a finite number of seconds >= 0, got {args.grace}"),
        None
        if args.metrics_port is None or 0 <= args.metrics_port <= 65535
        else FieldError("--metrics-port", f"must be a port, 0 to 65535, got {args.metrics_port}"),
        None
        if args.startup_timeout is None
        or (math.isfinite(args.startup_timeout) and args.startup_timeout >= 0)
        else FieldError(
            "--startup-timeout",
            f"must be a finite number of seconds >= 0, got {args.startup_timeout}",
        ),
    )
    if args.processes is not None and args.processes > 1:
        from .supervisor import supervise

        check_cli_config(load_config(args.config))  # once here, not in each copy
        return supervise(args.raw_argv, args.processes)
    runtime = _runtime(args, args.startup_timeout)
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
    try:
        if args.tracing:
            _extra(".tracing", "opentelemetry", "tracing").instrument(runtime)
        if args.metrics_port is not None:
            metrics = _extra(".metrics", "prometheus_client", "metrics")
            exporter = metrics.instrument(runtime)
            server = metrics.serve(exporter, args.metrics_port, args.metrics_addr)
    except BaseException:
        runtime.close()
        raise
    from .worker_signals import StopSignals, run_until_stopped

    stops = StopSignals().install()
    w = runtime.config.workers
    notice(
        f"conveyor worker {runtime.worker_id}: provider={runtime.config.provider} "
        f"queues={','.join(w.queues)} workers per queue={w.count} "
        f"handlers={','.join(sorted(runtime.registry.job_types())) or '(none)'}"
    )
    if server is not None:
        host, port = server.address
        notice(f"conveyor worker: metrics at http://{host}:{port}/metrics")
    try:
        return run_until_stopped(runtime, stops, args.grace)
    finally:
        if server is not None:
            server.close()


def _extra(module: str, package: str, extra: str) -> Any:
    """Import an optional part of conveyor, or fail in one line naming the extra."""
    try:
        return importlib.import_module(module, __package__)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != package:
            raise
        raise ModuleNotFoundError(
            f"{extra} needs {package}: pip install 'conveyor-jobs[{extra}]'", name=exc.name
        ) from None


def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.args) if args.args else {}
    except json.JSONDecodeError as exc:
        raise ValidationError.of("args", f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ValidationError.of("args", "is nested too deeply to parse") from None
    except ValueError:
        # json's own limit on integer digits; its message suggests a Python call.
        raise ValidationError.of("args", "holds an integer with too many digits") from None
    delay = None if args.delay is None else as_delay("delay", args.delay)
    if isinstance(delay, FieldError):
        raise ValidationError((delay,))
    runtime = _runtime(args)
    try:
        unknown = runtime.unknown_job_type(args.job_type)
        if unknown is not None and args.strict:
            raise ValidationError.of("job_type", unknown)
        job = runtime.enqueue(
            args.job_type,
            payload,
            queue=args.queue,
            priority=args.priority,
            max_retries=args.max_retries,
            delay=delay,
            tenant_id=args.tenant,
            partition=args.partition,
            timeout=args.timeout,
            id=args.id,
            unique_key=args.unique_key,
            unique_for=args.unique_for,
            unique_states=args.unique_state,
        )
    finally:
        runtime.close()
    print(job.id)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    _check(_tenant(args.tenant))
    runtime = _runtime(args, reads_only=True)
    try:
        status = runtime.status(tenant_id=args.tenant)
    finally:
        runtime.close()
    if args.json:
        print(json.dumps(status.to_dict(), indent=2, default=str))
    else:
        render_status(status)
    return 1 if any(q.flagged for q in status.queues) and args.strict else 0


def cmd_dead(args: argparse.Namespace) -> int:
    return run_dead(
        args, lambda: _runtime(args, reads_only=args.dead_command in ("list", "show"))
    )


def cmd_prune(args: argparse.Namespace) -> int:
    from ..core import parse_duration_ms

    older_than = None
    if args.older_than is not None:
        older_than = parse_duration_ms(args.older_than)
        if older_than is None:
            example = "a duration such as 7d, 12h, 30m or 90s"
            raise ValidationError.of("--older-than", f"must be {example}, got {args.older_than!r}")
    runtime = _runtime(args)
    try:
        count = runtime.prune(older_than_ms=older_than, dry_run=args.dry_run)
    finally:
        runtime.close()
    print(f"would prune {count} records" if args.dry_run else f"pruned {count} records")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from .migrate import migrate, migration_sql

    config = load_config(args.config)
    _REDACTING.secrets.update(config_secrets(config))
    if args.sql and config.provider == "db":
        print(migration_sql(config).rstrip("\n"))
    else:
        print(f"conveyor: {migrate(config)}")
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    from .lookup import describe

    if args.job_command == "cancel":
        return cmd_job_cancel(args)
    job_id = _job_id(args.job_id)
    runtime = _runtime(args, reads_only=True)
    try:
        view = runtime.get(job_id)
    finally:
        runtime.close()
    if view is None:
        notice(f"conveyor: no job {job_id}", level=logging.ERROR)
        return 1
    shown = {"show_args": args.show_args, "show_result": args.show_result}
    if args.json:
        print(json.dumps(view.to_dict(**shown), indent=2, default=str))
    else:
        lines = describe(view, **shown, show_traceback=args.traceback)
        print("\n".join(escape(line) for line in lines))
    return 0


def cmd_job_cancel(args: argparse.Namespace) -> int:
    """`conveyor job cancel ID`: 0 when cancelled or requested, 1 when there was nothing
    to cancel (finished, or no such job), 2 on bad input."""
    from ..core import CancelResult

    job_id = _job_id(args.job_id)
    runtime = _runtime(args)
    try:
        result = runtime.cancel(job_id)
    finally:
        runtime.close()
    if result is CancelResult.CANCELLED:
        print(f"cancelled job {job_id}")
    elif result is CancelResult.REQUESTED:
        print(f"cancel requested for running job {job_id}: recorded cancelled when it returns")
    elif result is CancelResult.FINISHED:
        notice(f"conveyor: job {job_id} has already finished; nothing to cancel")
        return 1
    else:
        notice(f"conveyor: no job {job_id}", level=logging.ERROR)
        return 1
    return 0


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    """`conveyor jobs cancel --queue Q --type T [--dry-run]`: 0 on success (also when
    nothing matched), 2 on bad input."""
    if args.queue is None and args.type is None:
        raise ValidationError.of("--queue", "give --queue, --type or both")
    _check(
        None if args.queue is None else check_name("--queue", args.queue),
        None if args.type is None else check_name("--type", args.type),
    )
    runtime = _runtime(args)
    try:
        counts = runtime.cancel_many(queue=args.queue, job_type=args.type, dry_run=args.dry_run)
    finally:
        runtime.close()
    verb, ask = ("would cancel", "ask") if args.dry_run else ("cancelled", "asked")
    print(f"{verb} {counts.cancelled} queued jobs, {ask} {counts.requested} running jobs to stop")
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from .lookup import SUMMARY_HEADERS, parse_state, summary_row

    if args.jobs_command == "cancel":
        return cmd_jobs_cancel(args)
    state = None if args.state is None else parse_state(args.state, "--state")
    _check(
        None if args.queue is None else check_name("--queue", args.queue),
        None if args.type is None else check_name("--type", args.type),
        state if isinstance(state, FieldError) else None,
        None if args.limit >= 0 else FieldError("--limit", f"must be >= 0, got {args.limit}"),
    )
    assert not isinstance(state, FieldError)
    runtime = _runtime(args, reads_only=True)
    try:
        views = runtime.list_jobs(
            queue=args.queue, state=state, job_type=args.type, limit=args.limit
        )
    finally:
        runtime.close()
    if args.json:
        print(json.dumps([v.to_dict() for v in views], indent=2, default=str))
    else:
        _print_table(SUMMARY_HEADERS, [summary_row(v) for v in views])
    return 0


def cmd_cron(args: argparse.Namespace) -> int:
    runtime = _runtime(args, reads_only=args.cron_command == "list")
    try:
        if args.cron_command == "run":
            job = runtime.cron.run(args.name)
            print(job.id)
            return 0
        rows = runtime.cron.list()
    finally:
        runtime.close()
    if args.json:
        print(json.dumps([row.to_dict() for row in rows], indent=2))
    elif not rows:
        print("no cron entries ([[cron]] in the config)")
    else:
        _print_table(
            ("name", "schedule", "timezone", "job type", "next run", "last run", "state"),
            [
                (
                    r.name,
                    r.schedule,
                    r.timezone,
                    r.job_type,
                    r.next_run.isoformat(timespec="seconds"),
                    None if r.last_slot is None else r.last_slot.isoformat(timespec="seconds"),
                    None if r.last_state is None else r.last_state.value,
                )
                for r in rows
            ],
        )
    return 0


#: The environment variable `conveyor dashboard` reads `USER:PASSWORD` from, when
#: `--basic-auth` is not given (so the password stays out of the process list).
DASHBOARD_AUTH_ENV = "CONVEYOR_DASHBOARD_BASIC_AUTH"


def cmd_dashboard(args: argparse.Namespace) -> int:
    """`conveyor dashboard`: serve the web dashboard until SIGINT/SIGTERM."""
    _extra("jinja2", "jinja2", "dashboard")
    dashboard = _extra(".dashboard", "starlette", "dashboard")
    uvicorn = _extra("uvicorn", "uvicorn", "dashboard")
    # The flags win over the environment, which wins over the config file's [dashboard].
    defaults = load_config(args.config).dashboard
    host = defaults.host if args.host is None else args.host
    port = defaults.port if args.port is None else args.port
    read_only = args.read_only or defaults.read_only
    auth = None
    credentials = args.basic_auth or os.environ.get(DASHBOARD_AUTH_ENV) or defaults.basic_auth
    if credentials:
        auth = dashboard.BasicAuth.parse(credentials)
        if isinstance(auth, FieldError):
            raise ValidationError((auth,))
        _REDACTING.secrets.add(credentials.partition(":")[2])
    if not 0 < port < 65536:
        raise ValidationError.of("--port", f"must be from 1 to 65535, got {port}")
    runtime = _runtime(args, startup_timeout_s=None, reads_only=True)
    try:
        if auth is None and host not in ("127.0.0.1", "localhost", "::1"):
            log.warning(
                "the dashboard listens on %s with no authentication: give --basic-auth "
                "or %s, or put it behind a proxy that authenticates",
                host,
                DASHBOARD_AUTH_ENV,
            )
        app = dashboard.create_app(runtime, read_only=read_only, auth=auth)
        shown = f"[{host}]" if ":" in host else host
        notice(f"conveyor dashboard: serving http://{shown}:{port}/ (Ctrl-C stops it)")
        # Its own log goes through the CLI's handlers, in the CLI's format.
        uvicorn.run(app, host=host, port=port, log_level="warning", log_config=None)
    finally:
        runtime.close()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    code: int = run_demo(directory=args.dir, jobs=args.jobs)
    return code


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="conveyor", description="Conveyor: background jobs you can trust.")
    p.add_argument("--version", action="version", version=f"conveyor {__version__}")
    p.add_argument(
        "--config", "-c", help="config file (default: nearest conveyor.toml or [tool.conveyor])"
    )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    p.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="text lines (default) or one JSON object per line, for log collectors",
    )
    sub = p.add_subparsers(dest="command", required=True)

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

    e = sub.add_parser("enqueue", help="enqueue one job and print its id")
    e.add_argument("job_type")
    e.add_argument("args", nargs="?", default="{}", help="job args as a JSON object")
    e.add_argument("--queue", "-q", default="default")
    e.add_argument(
        "--priority", "-p", default="normal", choices=["critical", "high", "normal", "low"]
    )
    e.add_argument("--max-retries", type=int, default=3)
    e.add_argument("--delay", type=float, default=None, help="seconds from now")
    e.add_argument("--tenant", default=None)
    e.add_argument(
        "--partition", default=None, help="the job's partition under limits (default: the tenant)"
    )
    e.add_argument(
        "--timeout", type=float, default=None, help="seconds one attempt may run (see handlers)"
    )
    e.add_argument(
        "--id", default=None, help="the job's id (a UUID); if taken, the job already there stays"
    )
    e.add_argument("--unique-key", default=None, help="enqueue nothing while this key is held")
    e.add_argument("--unique-for", type=float, default=None, help="seconds the key is held at most")
    e.add_argument(
        "--unique-state",
        action="append",
        default=None,
        help="a state in which the key is held (repeat; default: the unfinished ones)",
    )
    e.add_argument(
        "--strict",
        action="store_true",
        help="refuse a job type that no configured handler module registers",
    )
    e.set_defaults(func=cmd_enqueue)

    s = sub.add_parser("status", help="queues, counts, dead letters and live workers")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--tenant", default=None, help="count only this tenant's dead letters")
    s.add_argument("--strict", action="store_true", help="exit 1 when a queue is flagged")
    s.set_defaults(func=cmd_status)

    add_dead_commands(sub, cmd_dead)

    mg = sub.add_parser(
        "migrate", help="create or upgrade the database schema (the only command that runs DDL)"
    )
    mg.add_argument(
        "--sql", action="store_true", help="print the SQL to apply by hand instead of running it"
    )
    mg.set_defaults(func=cmd_migrate)

    pr = sub.add_parser(
        "prune", help="delete completed and dead-letter records past their retention"
    )
    pr.add_argument(
        "--older-than",
        default=None,
        help="prune records finished longer ago than this (7d, 12h, 30m, 90s), "
        "instead of the configured retention.completed_ms / retention.dead_ms",
    )
    pr.add_argument("--dry-run", action="store_true", help="only count what would go")
    pr.set_defaults(func=cmd_prune)

    j = sub.add_parser("job", help="one job, in whatever state it is in")
    jsub = j.add_subparsers(dest="job_command", required=True)
    js = jsub.add_parser("show", help="state, attempts, claim and lease, error (args hidden)")
    js.add_argument("job_id")
    js.add_argument("--json", action="store_true", help="machine-readable output")
    js.add_argument("--show-args", action="store_true", help="print the args (may hold secrets)")
    js.add_argument(
        "--show-result", action="store_true", help="print the result (may hold secrets)"
    )
    js.add_argument(
        "--traceback", action="store_true", help="print each attempt's traceback (--json has them)"
    )
    jc = jsub.add_parser("cancel", help="cancel a queued job, or ask a running one to stop")
    jc.add_argument("job_id")
    j.set_defaults(func=cmd_job)

    jl = sub.add_parser("jobs", help="list jobs by queue, state and type")
    jlsub = jl.add_subparsers(dest="jobs_command", required=True)
    jll = jlsub.add_parser("list", help="queued work first, then finished jobs, newest first")
    jll.add_argument("--queue", "-q", default=None)
    jll.add_argument(
        "--state",
        default=None,
        help="scheduled, pending, running, retrying, completed, failed, cancelled (dead = failed)",
    )
    jll.add_argument("--type", default=None, help="only jobs of this job type")
    jll.add_argument("--limit", type=int, default=50)
    jll.add_argument("--json", action="store_true", help="machine-readable output")
    jlc = jlsub.add_parser(
        "cancel", help="cancel every queued job of a queue and/or type; ask running ones to stop"
    )
    jlc.add_argument("--queue", "-q", default=None)
    jlc.add_argument("--type", default=None, help="only jobs of this job type")
    jlc.add_argument("--dry-run", action="store_true", help="only count what would be done")
    jl.set_defaults(func=cmd_jobs)

    cr = sub.add_parser("cron", help="the periodic jobs: list them, or run one now")
    crsub = cr.add_subparsers(dest="cron_command", required=True)
    crl = crsub.add_parser("list", help="each entry with its next run and its last run")
    crl.add_argument("--json", action="store_true", help="machine-readable output")
    crr = crsub.add_parser("run", help="enqueue an entry's job now, outside its schedule")
    crr.add_argument("name", help="the entry's name")
    cr.set_defaults(func=cmd_cron)

    db = sub.add_parser("dashboard", help="serve the web dashboard (needs the dashboard extra)")
    db.add_argument(
        "--host", default=None, help="address to listen on (default: [dashboard] host, 127.0.0.1)"
    )
    db.add_argument(
        "--port", type=int, default=None, help="port to listen on (default: [dashboard] port, 8000)"
    )
    db.add_argument("--read-only", action="store_true", help="refuse every action (retry, purge)")
    db.add_argument(
        "--basic-auth",
        default=None,
        metavar="USER:PASSWORD",
        help=f"require HTTP basic auth (or set {DASHBOARD_AUTH_ENV})",
    )
    db.set_defaults(func=cmd_dashboard)

    m = sub.add_parser("demo", help="a realistic mix of jobs on an embedded SQLite file")
    m.add_argument("--dir", default=None, help="where to put the SQLite file (default: a temp dir)")
    m.add_argument("--jobs", type=int, default=40, help="how many ordinary jobs to enqueue")
    m.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.raw_argv = list(sys.argv[1:] if argv is None else argv)
    # Like `python -m`, let handler modules next to the config import without PYTHONPATH.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(_REDACTING)
        if args.log_format == "text":
            handler.addFilter(_ESCAPING)  # after the redaction, which rewrites the message
        if args.log_format == "json":
            from .logs import JsonFormatter

            handler.setFormatter(JsonFormatter())
    use_json(args.log_format == "json")
    # Python's warnings (a library's deprecation) go through the log, in its format.
    logging.captureWarnings(args.log_format == "json")
    try:
        code: int = args.func(args)
        return code
    except BrokenPipeError:
        # The reader went away (`conveyor jobs list | head`): nothing to report. Point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        # Ctrl-C before a command set its own handlers (a worker still starting).
        notice("conveyor: interrupted", level=logging.WARNING)
        return 130
    except ValidationError as exc:
        notice(f"conveyor: invalid input: {_printable(str(exc))}", level=logging.ERROR)
        return 2
    except BackendError as exc:
        notice(f"conveyor: {_printable(str(exc))}", level=logging.ERROR)
        return 1
    except Exception as exc:
        # A traceback would print driver messages unredacted; --log-level DEBUG has it, masked.
        log.debug("command failed", exc_info=True)
        if _LOADED and is_outage(exc):
            error = ServerUnreachable.of(_LOADED[0], exc)
            notice(f"conveyor: {_printable(str(error))}", level=logging.ERROR)
            return 1
        notice(f"conveyor: {type(exc).__name__}: {_printable(str(exc))}", level=logging.ERROR)
        return 1


if __name__ == "__main__":
    sys.exit(main())
