"""Which `Host` names the dashboard answers: the guard against DNS rebinding.

A page on another site can have its own name re-pointed at 127.0.0.1 once it has
loaded. The browser then takes the dashboard for that site (same origin), lets the
page read it, CSRF token included, and post its actions; the `Host` header is the
one thing that still says which name the browser thinks it talks to. So a dashboard
that answers only to the names it is meant to be reached by cannot be read that
way. `conveyor dashboard` listening on a loopback address with no `allowed_hosts`
answers to the loopback names (`LOOPBACK`) and that address only; `/healthz`
answers whatever the `Host` (a probe names the address it reaches).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..terminal import clipped
from .rendering import SecurityHeaders

#: The names of this machine's loopback addresses, as a browser sends them.
LOOPBACK = ("127.0.0.1", "localhost", "::1")


#: The most of a refused `Host` the refusal repeats.
SHOWN_HOST_CHARS = 100

#: Answered whatever the `Host`: a load balancer's or Kubernetes' probe names the
#: address it reaches, not the dashboard's name, and the page tells nothing.
UNCHECKED_PATHS = frozenset({"/healthz"})


def host_name(header: str) -> str | None:
    """The name in a `Host` header, lower case, without its port or brackets; None
    when it is not one (a user part, `evil@127.0.0.1`, is not: a browser never sends
    one, and the name after it is not the one the request was meant for)."""
    if "@" in header:
        return None
    try:
        name = urlsplit(f"//{header.strip()}").hostname
    except ValueError:
        return None
    return name or None


def is_loopback(host: str, *, every: bool = False) -> bool:
    """Whether listening on `host` serves this machine only (any loopback address:
    127.0.0.0/8, ::1, an IPv4-mapped one). A name is loopback when any address it
    resolves to is (when unsure, its Host names are held), or with `every`, only when
    each is (when unsure, the missing authentication is warned of)."""
    name = host.strip("[]").lower()
    if name in LOOPBACK:
        return True
    try:
        addresses = [ipaddress.ip_address(name)]
    except ValueError:
        # A name, or an address in another spelling (127.1): what it listens on is
        # what it resolves to (this machine's own name is 127.0.1.1 on Debian).
        try:
            found = socket.getaddrinfo(name, None)
        except (OSError, UnicodeError):
            return False
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found]
    looped = [_loops_back(address) for address in addresses]
    return all(looped) if every else any(looped)


def names_of_loopback(host: str) -> tuple[str, ...]:
    """The names a dashboard listening on `host` answers to unless told: on a loopback
    address, this machine's loopback names and that address (127.0.0.2, say, as a
    browser sends it), and no other (DNS rebinding); elsewhere, none to check."""
    if not is_loopback(host):
        return ()
    return tuple(dict.fromkeys((*LOOPBACK, host.strip("[]").lower())))


def _loops_back(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


class HostCheck:
    """Answers 400 to a request whose `Host` names none of `allowed` (a name, or an
    address; `*` allows every name)."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(name.strip("[]").lower() for name in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] not in ("http", "websocket")
            or "*" in self.allowed
            or own_path(scope) in UNCHECKED_PATHS
        ):
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or ()).get(b"host", b"").decode("latin-1")
        if host_name(header) in self.allowed:
            await self.app(scope, receive, send)
            return
        names = ", ".join(sorted(self.allowed))
        shown = clipped(header, SHOWN_HOST_CHARS)
        refused = PlainTextResponse(
            f"this dashboard answers to {names} only, not to the Host {shown!r} "
            "(conveyor dashboard --allowed-host NAME, or [dashboard] allowed_hosts)\n",
            status_code=400,
        )
        # The refusal carries the headers every other response does (it is answered
        # before the dashboard's own app, which adds them).
        await SecurityHeaders(refused)(scope, receive, send)


def own_path(scope: Scope) -> str:
    """The request's path within the dashboard (mounted under a prefix, the path
    still starts with it: Starlette's `root_path`)."""
    path, root = str(scope.get("path", "")), str(scope.get("root_path", ""))
    return path[len(root) :] if root and path.startswith(root) else path
