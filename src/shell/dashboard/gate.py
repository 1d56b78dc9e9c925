"""The gate every request of the dashboard passes: authentication, and an action's checks.

A page, or a static file, needs the `auth` hook's yes (failed logins are throttled
per client by `auth.LoginThrottle`). An action needs more: the dashboard must not be
read-only, the POST must come from the dashboard's own origin, its form must be
small, and it must carry a CSRF token signed by this server (`csrf.CsrfGuard` says
how and why).
"""

from __future__ import annotations

import math
from urllib.parse import parse_qs

import attrs
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .auth import AuthHook, LoginThrottle
from .csrf import CSRF_FIELD, CsrfGuard

#: The largest action form body read (every form holds a few short fields).
MAX_FORM_BYTES = 16_384


@attrs.frozen(slots=True)
class Refused:
    """Why an action was refused: the status and the line to show."""

    status: int
    message: str


class Gate:
    """Lets a request through, or says why not."""

    def __init__(
        self,
        auth: AuthHook | None,
        throttle: LoginThrottle,
        csrf: CsrfGuard,
        *,
        read_only: bool,
    ) -> None:
        self.auth, self.throttle, self.csrf, self.read_only = auth, throttle, csrf, read_only

    def refused(self, request: Request) -> Response | None:
        """None when `request` may see the dashboard; else the answer refusing it."""
        if self.auth is None:
            return None
        client = request.client.host if request.client else ""
        wait = self.throttle.wait_s(client)
        if wait > 0:
            return Response(
                "too many failed logins from this address: try again later",
                429,
                headers={"retry-after": str(math.ceil(wait))},
            )
        if self.auth(request):
            self.throttle.succeeded(client)
            return None
        if request.headers.get("authorization"):
            self.throttle.failed(client)  # a wrong guess, not the browser's first ask
        challenge = getattr(self.auth, "challenge", None)
        if isinstance(challenge, str):
            return Response("authentication required", 401, headers={"www-authenticate": challenge})
        return Response("not allowed", 403)

    def guard(self, app: ASGIApp) -> ASGIApp:
        """`app` (the static files) behind the pages' login. They are only the
        dashboard's own CSS and script, but open to anyone they would tell a scanner
        that a Conveyor dashboard answers here; behind it, the rule is simply "every
        request but /healthz needs the login"."""

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            refused = self.refused(Request(scope))
            await (app if refused is None else refused)(scope, receive, send)

        return guarded

    async def action_form(self, request: Request) -> dict[str, str] | Refused:
        """The form of an action that may be carried out, or why it may not."""
        if self.read_only:
            return Refused(403, "The dashboard is read-only: actions are off.")
        foreign = self.csrf.foreign_origin(request)
        if foreign is not None:
            return Refused(403, f"The action was refused: {foreign}.")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:  # read no further than a form can need
                return Refused(413, "The form is too large.")
        parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        form = {key: values[0] for key, values in parsed.items()}
        if not self.csrf.token_matches(request, form.get(CSRF_FIELD, "")):
            return Refused(403, "The form's CSRF token is missing or wrong: reload the page.")
        return form
