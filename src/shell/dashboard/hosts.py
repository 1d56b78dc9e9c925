"""Which `Host` names the dashboard answers: the guard against DNS rebinding.

A page on another site can have its own name re-pointed at 127.0.0.1 once it has
loaded. The browser then takes the dashboard for that site (same origin), lets the
page read it, CSRF token included, and post its actions; the `Host` header is the
one thing that still says which name the browser thinks it talks to. So a dashboard
that answers only to the names it is meant to be reached by cannot be read that
way. `conveyor dashboard` listening on a loopback address with no `allowed_hosts`
answers to the loopback names only (`LOOPBACK`).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

#: The names of this machine's loopback addresses, as a browser sends them.
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def host_name(header: str) -> str | None:
    """The name in a `Host` header, lower case, without its port or brackets; None
    when it is not one."""
    try:
        name = urlsplit(f"//{header.strip()}").hostname
    except ValueError:
        return None
    return name or None


def is_loopback(host: str) -> bool:
    """Whether listening on `host` serves this machine only."""
    return host.strip("[]").lower() in LOOPBACK


class HostCheck:
    """Answers 400 to a request whose `Host` names none of `allowed` (a name, or an
    address; `*` allows every name)."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(name.strip("[]").lower() for name in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or "*" in self.allowed:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or ()).get(b"host", b"").decode("latin-1")
        if host_name(header) in self.allowed:
            await self.app(scope, receive, send)
            return
        names = ", ".join(sorted(self.allowed))
        refused = PlainTextResponse(
            f"this dashboard answers to {names} only, not to the Host {header!r} "
            "(conveyor dashboard --allowed-host NAME, or [dashboard] allowed_hosts)\n",
            status_code=400,
        )
        await refused(scope, receive, send)
