"""`conveyor dashboard`: serve the web dashboard until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from ...core import FieldError, ValidationError
from ..config import load_config
from ..config.checks import host_name_problem
from ..notices import notice
from .runtime import REDACTING, command_runtime, import_extra

log = logging.getLogger("conveyor.cli")

#: The environment variable `conveyor dashboard` reads `USER:PASSWORD` from, when
#: `--basic-auth` is not given (so the password stays out of the process list).
DASHBOARD_AUTH_ENV = "CONVEYOR_DASHBOARD_BASIC_AUTH"


def cmd_dashboard(args: argparse.Namespace) -> int:
    """`conveyor dashboard`: serve the web dashboard until SIGINT/SIGTERM."""
    import_extra("jinja2", "jinja2", "dashboard")
    dashboard = import_extra("..dashboard", "starlette", "dashboard")
    uvicorn = import_extra("uvicorn", "uvicorn", "dashboard")
    from ..dashboard.hosts import HostCheck, is_loopback, names_of_loopback
    # The flags win over the environment, which wins over the config file's [dashboard].
    defaults = load_config(args.config).dashboard
    host = defaults.host if args.host is None else args.host
    port = defaults.port if args.port is None else args.port
    read_only = args.read_only or defaults.read_only
    auth = None
    credentials, field = args.basic_auth, "--basic-auth"
    if not credentials and os.environ.get(DASHBOARD_AUTH_ENV):
        credentials, field = os.environ[DASHBOARD_AUTH_ENV], DASHBOARD_AUTH_ENV
    elif not credentials:
        credentials, field = defaults.basic_auth, "dashboard.basic_auth"
    if credentials:
        auth = dashboard.BasicAuth.parse(credentials, field)
        if isinstance(auth, FieldError):
            raise ValidationError((auth,))
        REDACTING.secrets.add(credentials.partition(":")[2])
    if not 0 < port < 65536:
        raise ValidationError.of("--port", f"must be from 1 to 65535, got {port}")
    runtime = command_runtime(args, startup_timeout_s=None, reads_only=True)
    try:
        if auth is None and not is_loopback(host, every=True):
            log.warning(
                "the dashboard listens on %s with no authentication: give --basic-auth "
                "or %s, or put it behind a proxy that authenticates",
                host,
                DASHBOARD_AUTH_ENV,
            )
        app = dashboard.create_app(runtime, read_only=read_only, auth=auth)
        allowed = args.allowed_host or defaults.allowed_hosts
        for given in args.allowed_host or ():
            problem = host_name_problem(given)
            if problem is not None:
                raise ValidationError.of("--allowed-host", problem)
        if not allowed:
            allowed = names_of_loopback(host)
        if allowed:
            app = HostCheck(app, allowed)
        shown = f"[{host}]" if ":" in host else host
        notice(f"conveyor dashboard: serving http://{shown}:{port}/ (Ctrl-C stops it)")
        # Its own log goes through the CLI's handlers, in the CLI's format.
        # No client address is taken from X-Forwarded-For: the login throttle counts
        # by address, and a forged header would dodge it or lock another client out.
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="warning",
            log_config=None,
            proxy_headers=False,
        )
    finally:
        runtime.close()
    return 0


def add_dashboard_command(sub: Any) -> None:
    """The `dashboard` command, on the CLI's subparsers `sub`."""
    db = sub.add_parser("dashboard", help="serve the web dashboard (needs the dashboard extra)")
    db.add_argument(
        "--host", default=None, help="address to listen on (default: [dashboard] host, 127.0.0.1)"
    )
    db.add_argument(
        "--port", type=int, default=None, help="port to listen on (default: [dashboard] port, 8000)"
    )
    db.add_argument("--read-only", action="store_true", help="refuse every action (retry, purge)")
    db.add_argument(
        "--allowed-host",
        action="append",
        default=None,
        metavar="NAME",
        help="a Host name the dashboard answers to, repeatable; '*' for any (default: "
        "[dashboard] allowed_hosts; the loopback names when it listens on loopback)",
    )
    db.add_argument(
        "--basic-auth",
        default=None,
        metavar="USER:PASSWORD",
        help=f"require HTTP basic auth (or set {DASHBOARD_AUTH_ENV})",
    )
    db.set_defaults(func=cmd_dashboard)
