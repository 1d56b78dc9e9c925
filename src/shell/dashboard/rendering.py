"""What every dashboard response carries: pages rendered by Jinja2 with autoescaping
and hidden characters marked (`marks`), and the security headers.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode

import jinja2
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..lookup import summary_row
from .marks import finalize as marks_finalize

#: Headers on every response: no framing, no sniffing, scripts only from this origin.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class SecurityHeaders:
    """Adds `SECURITY_HEADERS` to every response of the wrapped app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [
                    (name.encode(), value.encode())
                    for name, value in SECURITY_HEADERS.items()
                    if name.encode() not in present
                ]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(timespec="seconds")


def environment(templates: Path) -> jinja2.Environment:
    """The pages' Jinja2 environment over the `templates` folder."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates),
        # Every value is escaped unless a template says otherwise (none does), and
        # characters that reorder or hide text are shown as marks.
        autoescape=True,
        finalize=marks_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ago"] = _ago
    env.filters["when"] = _when
    env.filters["qs"] = lambda params: urlencode(params)
    env.globals["summary"] = summary_row
    return env
