"""The dashboard's ASGI application: routes, authentication, CSRF and rendering.

Pages are rendered on the server by Jinja2 with autoescaping on, so job data
(args, errors, tracebacks, results) is always text, never markup. One small
script of our own (`static/live.js`) swaps the overview's live fragment every
few seconds; the pages work without it.

Every POST is an action. Each is refused with 403 in read-only mode, and
otherwise must carry the CSRF token: a random value the server puts in a
`SameSite=Strict`, HTTP-only cookie and in a hidden field of each form it renders;
a request whose field does not equal its cookie is refused. Another site can make
a browser send the cookie (SameSite aside) but cannot read it to fill the field.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode
from uuid import UUID

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...core import CancelResult, FieldError, JobStatus, ValidationError
from ...core.validation import parse_job_id
from ..lookup import summary_row
from ..runtime import Runtime
from . import views

#: A callable that decides whether a request may see the dashboard at all.
AuthHook = Callable[[Request], bool]

#: The cookie holding the CSRF token.
CSRF_COOKIE = "conveyor_csrf"

#: The hidden form field that must repeat the cookie's token.
CSRF_FIELD = "csrf_token"

#: What `secrets.token_urlsafe` makes: a cookie of any other shape is not a token.
_URLSAFE = re.compile(r"[A-Za-z0-9_-]+")

#: The largest action form body read (every form holds a few short fields).
MAX_FORM_BYTES = 16_384

HERE = Path(__file__).resolve().parent

#: What a redirect after an action reports, by the `done` code in its query string.
NOTICES = {
    "retried": "Retried {n} dead letter(s): they are queued again.",
    "purged": "Purged {n} dead letter(s).",
    "cancelled": "Cancelled the job.",
    "requested": "Asked the running job to stop: it is recorded cancelled when it returns.",
    "ran": "Enqueued the cron entry's job now.",
}

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


class BasicAuth:
    """HTTP basic authentication against one user name and password: the simple
    `auth` hook. A refused request gets 401 and the browser's login prompt."""

    #: The `WWW-Authenticate` value a refusal carries.
    challenge = 'Basic realm="conveyor", charset="UTF-8"'

    def __init__(self, username: str, password: str) -> None:
        self._expected = f"{username}:{password}".encode()

    @classmethod
    def parse(cls, text: str, field: str = "--basic-auth") -> BasicAuth | FieldError:
        """`user:password` as a `BasicAuth`, or why it is not one."""
        username, colon, password = text.partition(":")
        if not colon or not username or not password:
            return FieldError(field, "must be USER:PASSWORD, both non-empty")
        return cls(username, password)

    def __call__(self, request: Request) -> bool:
        scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, self._expected)


class _SecurityHeaders:
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


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        # Every value is escaped unless a template says otherwise (none does).
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ago"] = _ago
    env.filters["when"] = _when
    env.filters["qs"] = lambda params: urlencode(params)
    env.globals["summary"] = summary_row
    return env


Endpoint = Callable[[Request], Awaitable[Response]]


class Dashboard:
    """The pages and actions over one runtime; `create_app` wraps it in Starlette."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        read_only: bool = False,
        auth: AuthHook | None = None,
        live_every_s: float = 3.0,
    ) -> None:
        self.runtime = runtime
        self.read_only = read_only
        self.auth = auth
        self.live_every_ms = max(250, round(live_every_s * 1000))
        self.env = _environment()
        self.chart = views.ThroughputCounts(runtime)

    # ---- plumbing ---------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        page, action = self._page, self._action
        return [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/", page(self.overview), methods=["GET"]),
            Route("/live/overview", page(self.overview_live), methods=["GET"]),
            Route("/jobs", page(self.jobs), methods=["GET"]),
            Route("/jobs/{job_id}", page(self.job), methods=["GET"]),
            Route("/jobs/{job_id}/cancel", action(self.cancel), methods=["POST"]),
            Route("/dead", page(self.dead), methods=["GET"]),
            Route("/dead/confirm", page(self.dead_confirm), methods=["GET"]),
            Route("/dead/retry", action(self.dead_retry), methods=["POST"]),
            Route("/dead/purge", action(self.dead_purge), methods=["POST"]),
            Route("/dead/bulk", action(self.dead_bulk), methods=["POST"]),
            Route("/workers", page(self.workers), methods=["GET"]),
            Route("/limits", page(self.limits), methods=["GET"]),
            Route("/cron", page(self.cron), methods=["GET"]),
            Route("/cron/run", action(self.cron_run), methods=["POST"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]

    def _refused(self, request: Request) -> Response | None:
        if self.auth is None or self.auth(request):
            return None
        challenge = getattr(self.auth, "challenge", None)
        if isinstance(challenge, str):
            return Response("authentication required", 401, headers={"www-authenticate": challenge})
        return Response("not allowed", 403)

    def _page(self, handler: Endpoint) -> Endpoint:
        async def guarded(request: Request) -> Response:
            refused = self._refused(request)
            if refused is not None:
                return refused
            return await handler(request)

        return guarded

    def _action(
        self, handler: Callable[[Request, dict[str, str]], Awaitable[Response]]
    ) -> Endpoint:
        async def guarded(request: Request) -> Response:
            refused = self._refused(request)
            if refused is not None:
                return refused
            if self.read_only:
                return self._error(request, 403, "The dashboard is read-only: actions are off.")
            body = b""
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_FORM_BYTES:  # read no further than a form can need
                    return self._error(request, 413, "The form is too large.")
            parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
            form = {key: values[0] for key, values in parsed.items()}
            cookie, unset = self._token(request)
            field = form.get(CSRF_FIELD, "")
            if unset or not hmac.compare_digest(cookie.encode(), field.encode()):
                return self._error(
                    request, 403, "The form's CSRF token is missing or wrong: reload the page."
                )
            try:
                return await handler(request, form)
            except ValidationError as exc:
                return self._error(request, 400, str(exc))
            finally:
                # A retry or purge changes the dead letters the chart counted.
                self.chart.clear()

        return guarded

    def _base(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def _token(self, request: Request) -> tuple[str, bool]:
        """The request's CSRF token, and whether it is new (to be set as the cookie)."""
        token = request.cookies.get(CSRF_COOKIE, "")
        if 20 <= len(token) <= 100 and token.isascii() and _URLSAFE.fullmatch(token):
            return token, False
        return secrets.token_urlsafe(32), True

    def _render(
        self, request: Request, template: str, context: Mapping[str, Any], status: int = 200
    ) -> HTMLResponse:
        token, new = self._token(request)
        done = request.query_params.get("done", "")
        count = request.query_params.get("n", "1")
        notice = NOTICES.get(done, "").format(n=int(count) if count.isdigit() else 1)
        html = self.env.get_template(template).render(
            base=self._base(request),
            csrf_field=CSRF_FIELD,
            csrf_token=token,
            read_only=self.read_only,
            live_every_ms=self.live_every_ms,
            notice=notice,
            **context,
        )
        response = HTMLResponse(html, status)
        if new:
            response.set_cookie(
                CSRF_COOKIE,
                token,
                path=self._base(request) or "/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    def _error(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self._render(
            request,
            "error.html",
            {"title": "Error", "page": "", "status": status, "message": message},
            status,
        )

    def _redirect(self, request: Request, path: str, **params: Any) -> Response:
        query = f"?{urlencode(params)}" if params else ""
        return RedirectResponse(f"{self._base(request)}{path}{query}", 303)

    def _filters(self, request: Request) -> views.Filters | HTMLResponse:
        filters = views.parse_filters(request.query_params)
        if isinstance(filters, FieldError):
            return self._error(request, 400, f"{filters.field}: {filters.reason}")
        return filters

    # ---- pages ------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        """200 while the backend answers a point read; 503 otherwise. No auth: probes."""
        try:
            await run_in_threadpool(self.runtime.get, UUID(int=0))
        except Exception as exc:
            return JSONResponse({"status": "unavailable", "error": type(exc).__name__}, 503)
        return JSONResponse({"status": "ok"})

    async def overview(self, request: Request) -> Response:
        data = await run_in_threadpool(views.overview, self.runtime, self.chart)
        return self._render(request, "overview.html", self._overview_context(data))

    async def overview_live(self, request: Request) -> Response:
        data = await run_in_threadpool(views.overview, self.runtime, self.chart)
        return self._render(request, "_overview_live.html", self._overview_context(data))

    def _overview_context(self, data: views.Overview) -> dict[str, Any]:
        bars, top = views.chart_bars(data.throughput)
        return {
            "title": "Overview",
            "page": "overview",
            "data": data,
            "bars": bars,
            "top": top,
            "chart_width": views.CHART_WIDTH,
            "chart_height": views.CHART_HEIGHT,
        }

    async def jobs(self, request: Request) -> Response:
        filters = self._filters(request)
        number = views.parse_page(request.query_params.get("page"))
        if isinstance(filters, HTMLResponse):
            return filters
        if isinstance(number, FieldError):
            return self._error(request, 400, f"{number.field}: {number.reason}")
        page = await run_in_threadpool(views.jobs_page, self.runtime, filters, number)
        return self._render(
            request,
            "jobs.html",
            {
                "title": "Jobs",
                "page": "jobs",
                "filters": filters,
                "listing": page,
                "states": [s.value for s in JobStatus],
            },
        )

    async def job(self, request: Request) -> Response:
        job_id = parse_job_id(request.path_params["job_id"])
        if isinstance(job_id, FieldError):
            return self._error(request, 404, f"No job: {job_id.reason}.")
        view = await run_in_threadpool(self.runtime.get, job_id)
        if view is None:
            return self._error(request, 404, f"No job {job_id} in the queue or the store.")
        show_args = request.query_params.get("args") == "1"
        show_result = request.query_params.get("result") == "1"
        return self._render(
            request,
            "job.html",
            {
                "title": f"Job {job_id}",
                "page": "jobs",
                "view": view,
                "show_args": show_args,
                "show_result": show_result,
                "args": views.args_text(view) if show_args else "",
                "result": views.pretty(view.job.result) if show_result and view.job else "",
            },
        )

    async def dead(self, request: Request) -> Response:
        filters = self._filters(request)
        number = views.parse_page(request.query_params.get("page"))
        if isinstance(filters, HTMLResponse):
            return filters
        if isinstance(number, FieldError):
            return self._error(request, 400, f"{number.field}: {number.reason}")

        page, total = await run_in_threadpool(views.dead_listing, self.runtime, filters, number)
        return self._render(
            request,
            "dead.html",
            {
                "title": "Dead letters",
                "page": "dead",
                "filters": filters,
                "listing": page,
                "total": total,
            },
        )

    async def dead_confirm(self, request: Request) -> Response:
        filters = self._filters(request)
        if isinstance(filters, HTMLResponse):
            return filters
        what = request.query_params.get("action", "")
        if what not in ("retry", "purge"):
            return self._error(request, 400, "action: must be retry or purge")
        count = await run_in_threadpool(views.count_dead, self.runtime, filters)
        return self._render(
            request,
            "dead_confirm.html",
            {
                "title": "Confirm",
                "page": "dead",
                "filters": filters,
                "action": what,
                "count": min(count, views.BULK_LIMIT),
                "more": count > views.BULK_LIMIT,
            },
        )

    async def workers(self, request: Request) -> Response:
        rows, running = await run_in_threadpool(views.workers, self.runtime)
        return self._render(
            request,
            "workers.html",
            {"title": "Workers", "page": "workers", "workers": rows, "running": running},
        )

    async def limits(self, request: Request) -> Response:
        now = self.runtime.clock.now()
        reports = await run_in_threadpool(self.runtime.limit_reports, now)
        return self._render(
            request,
            "limits.html",
            {"title": "Limits", "page": "limits", "reports": reports, "now": now},
        )

    async def cron(self, request: Request) -> Response:
        rows = await run_in_threadpool(self.runtime.cron.list)
        return self._render(request, "cron.html", {"title": "Cron", "page": "cron", "rows": rows})

    # ---- actions ----------------------------------------------------------------

    async def cancel(self, request: Request, form: dict[str, str]) -> Response:
        job_id = request.path_params["job_id"]
        result = await run_in_threadpool(self.runtime.cancel, job_id)
        if result is CancelResult.CANCELLED:
            return self._redirect(request, f"/jobs/{job_id}", done="cancelled")
        if result is CancelResult.REQUESTED:
            return self._redirect(request, f"/jobs/{job_id}", done="requested")
        return self._error(request, 409, f"Job {job_id} has finished or is unknown: not cancelled.")

    async def dead_retry(self, request: Request, form: dict[str, str]) -> Response:
        job = await run_in_threadpool(self.runtime.retry_dead, form.get("job_id", ""))
        return self._redirect(request, f"/jobs/{job.id}", done="retried", n=1)

    async def dead_purge(self, request: Request, form: dict[str, str]) -> Response:
        job_id = form.get("job_id", "")
        if not job_id:
            raise ValidationError.of("job_id", "give the dead letter to purge")
        purged = await run_in_threadpool(self.runtime.purge_dead, job_id)
        if purged == 0:
            return self._error(request, 409, f"{job_id} is not a dead letter: nothing purged.")
        return self._redirect(request, "/dead", done="purged", n=purged)

    async def dead_bulk(self, request: Request, form: dict[str, str]) -> Response:
        filters = views.parse_filters(form)
        if isinstance(filters, FieldError):
            raise ValidationError((filters,))
        what = form.get("action", "")
        if what not in ("retry", "purge"):
            raise ValidationError.of("action", "must be retry or purge")
        done = await run_in_threadpool(self._bulk, what, filters)
        back = {key: value for key, value in filters.query().items() if key != "state"}
        return self._redirect(
            request, "/dead", done="retried" if what == "retry" else "purged", n=done, **back
        )

    def _bulk(self, what: str, filters: views.Filters) -> int:
        if what == "purge" and filters == views.Filters():
            return self.runtime.purge_dead(None)  # one statement, however many there are
        done = 0
        for job in views.matching_dead(self.runtime, filters):
            try:
                if what == "retry":
                    self.runtime.retry_dead(job.id)
                    done += 1
                else:
                    done += self.runtime.purge_dead(job.id)
            except ValidationError:
                pass  # retried or purged by someone else since it was listed
        return done

    async def cron_run(self, request: Request, form: dict[str, str]) -> Response:
        job = await run_in_threadpool(self.runtime.cron.run, form.get("name", ""))
        return self._redirect(request, f"/jobs/{job.id}", done="ran")


def create_app(
    runtime: Runtime,
    *,
    read_only: bool = False,
    auth: AuthHook | None = None,
    live_every_s: float = 3.0,
) -> ASGIApp:
    """The dashboard as an ASGI app over `runtime`, to serve on its own (`conveyor
    dashboard`) or mount in another ASGI app (for example Starlette's `Mount`).

    `read_only` refuses every action with 403. `auth` is called with each request
    (a Starlette `Request`) and must return True to let it through; `BasicAuth(user,
    password)` is the simple case. `/healthz` answers without it, for probes. The
    overview refreshes its figures every `live_every_s` seconds."""
    dashboard = Dashboard(runtime, read_only=read_only, auth=auth, live_every_s=live_every_s)
    return _SecurityHeaders(Starlette(routes=dashboard.routes()))
