"""The dashboard's ASGI application: routes, pages and rendering.

Pages are rendered on the server by Jinja2 with autoescaping on, so job data
(args, errors, tracebacks, results) is always text, never markup. One small
script of our own (`static/live.js`) swaps the overview's live fragment every
few seconds; the pages work without it.

Every POST is an action, refused with 403 in read-only mode, and otherwise only
from the dashboard's own origin with a CSRF token signed by this server
(`csrf.CsrfGuard`); failed logins are throttled (`auth.LoginThrottle`). `gate.Gate`
checks; the actions are in `actions`, the workflow page in `workflow_page`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from ...core import FieldError, JobStatus, ValidationError
from ...core.validation import parse_job_id
from ..job_text import progress_text
from ..ports.workflows import WorkflowJobQueue
from ..runtime import Runtime
from .actions import Actions, confirmed_at, notice_of, sealed
from .auth import AuthHook, BasicAuth, LoginThrottle
from .csrf import CSRF_COOKIE, CSRF_FIELD, CsrfGuard
from .gate import Gate, Refused
from .hosts import own_path
from .reachability import DEFAULT_TIMEOUT_S, BackendFailed, BackendReads, BackendUnavailable
from .rendering import SecurityHeaders, environment
from .views import (
    BULK_LIMIT,
    CHART_HEIGHT,
    CHART_WIDTH,
    Filters,
    ThroughputCounts,
    args_text,
    chart_bars,
    count_dead,
    dead_listing,
    jobs_page,
    parse_filters,
    parse_page,
    pretty,
)
from .views import Overview as views_Overview
from .views import overview as views_overview
from .views import workers as views_workers
from .workflow_page import WorkflowPages

__all__ = ["CSRF_COOKIE", "CSRF_FIELD", "AuthHook", "BasicAuth", "LoginThrottle", "create_app"]

HERE = Path(__file__).resolve().parent

Endpoint = Callable[[Request], Awaitable[Response]]


class Dashboard(Actions, WorkflowPages):
    """The pages and actions over one runtime; `create_app` wraps it in Starlette."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        read_only: bool = False,
        auth: AuthHook | None = None,
        live_every_s: float = 3.0,
        csrf_secret: bytes | str | None = None,
        trusted_origins: Iterable[str] = (),
        login_throttle: LoginThrottle | None = None,
        backend_timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.runtime = runtime
        self.read_only = read_only
        self.auth = auth
        self.csrf = CsrfGuard(csrf_secret, trusted_origins)
        self.backend = BackendReads(runtime, backend_timeout_s)
        self.throttle = login_throttle or LoginThrottle()
        self.gate = Gate(auth, self.throttle, self.csrf, read_only=read_only)
        self.live_every_ms = max(250, round(live_every_s * 1000))
        self.env = environment(HERE / "templates")
        self.chart = ThroughputCounts(runtime)

    def routes(self) -> list[BaseRoute]:
        page, action = self._page, self._action
        static = self.gate.guard(StaticFiles(directory=HERE / "static"))
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
            Route("/dead/purge", page(self.dead_purge_confirm), methods=["GET"]),
            Route("/dead/purge", action(self.dead_purge), methods=["POST"]),
            Route("/dead/bulk", action(self.dead_bulk), methods=["POST"]),
            Route("/workers", page(self.workers), methods=["GET"]),
            Route("/limits", page(self.limits), methods=["GET"]),
            Route("/cron", page(self.cron), methods=["GET"]),
            Route("/cron/run", action(self.cron_run), methods=["POST"]),
            *self.workflow_routes(page, action),
            Mount("/static", static, name="static"),
        ]

    def _page(self, handler: Endpoint) -> Endpoint:
        async def guarded(request: Request) -> Response:
            refused = self.gate.refused(request)
            if refused is not None:
                return refused
            try:
                return await handler(request)
            except BackendUnavailable as exc:  # down, late, or a read that failed
                return self._error(request, 503, str(exc))

        return guarded

    def _action(
        self, handler: Callable[[Request, dict[str, str]], Awaitable[Response]]
    ) -> Endpoint:
        async def guarded(request: Request) -> Response:
            refused = self.gate.refused(request)
            if refused is not None:
                return refused
            form = await self.gate.action_form(request)
            if isinstance(form, Refused):
                return self._error(request, form.status, form.message)
            try:
                return await handler(request, form)
            except ValidationError as exc:
                return self._error(request, 400, str(exc))
            except Exception as exc:  # not a bare 500: the page says what failed
                return self._error(request, 503, self.backend.failure_text(exc))
            finally:  # a retry or purge changes the dead letters the chart counted
                self.chart.clear()

        return guarded

    def _base(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def _render(
        self, request: Request, template: str, context: Mapping[str, Any], status: int = 200
    ) -> HTMLResponse:
        nonce, new = self.csrf.nonce(request)
        html = self.env.get_template(template).render(
            base=self._base(request),
            csrf_field=CSRF_FIELD,
            csrf_token=self.csrf.token(nonce, request),
            read_only=self.read_only,
            live_every_ms=self.live_every_ms,
            notice=notice_of(own_path(request.scope), request.query_params, self.csrf),
            **context,
        )
        response = HTMLResponse(html, status)
        if new:
            response.set_cookie(
                CSRF_COOKIE,
                nonce,
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
        query = f"?{urlencode(sealed(path, params, self.csrf))}" if params else ""
        return RedirectResponse(f"{self._base(request)}{path}{query}", 303)

    def _filters(self, request: Request, *, with_state: bool = True) -> Filters | HTMLResponse:
        filters = parse_filters(request.query_params, with_state=with_state)
        if isinstance(filters, FieldError):
            return self._error(request, 400, f"{filters.field}: {filters.reason}")
        return filters

    # ---- pages ------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        """200 while the backend answers a point read; 503 otherwise. No auth: probes."""
        try:
            await self.backend.read(self.runtime.get, UUID(int=0))
        except BackendUnavailable as exc:
            error = exc.kind if isinstance(exc, BackendFailed) else "unreachable"
            return JSONResponse({"status": "unavailable", "error": error}, 503)
        return JSONResponse({"status": "ok"})

    async def overview(self, request: Request) -> Response:
        data = await self.backend.read(views_overview, self.runtime, self.chart)
        return self._render(request, "overview.html", self._overview_context(data))

    async def overview_live(self, request: Request) -> Response:
        try:
            data = await self.backend.read(views_overview, self.runtime, self.chart)
        except BackendUnavailable as exc:
            # The overview's script shows this line and marks the figures stale.
            return PlainTextResponse(str(exc), 503)
        return self._render(request, "_overview_live.html", self._overview_context(data))

    def _overview_context(self, data: views_Overview) -> dict[str, Any]:
        bars, top = chart_bars(data.throughput)
        return {
            "title": "Overview",
            "page": "overview",
            "data": data,
            "bars": bars,
            "top": top,
            "chart_width": CHART_WIDTH,
            "chart_height": CHART_HEIGHT,
        }

    async def jobs(self, request: Request) -> Response:
        filters = self._filters(request)
        number = parse_page(request.query_params.get("page"))
        if isinstance(filters, HTMLResponse):
            return filters
        if isinstance(number, FieldError):
            return self._error(request, 400, f"{number.field}: {number.reason}")
        page = await self.backend.read(jobs_page, self.runtime, filters, number)
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
        view = await self.backend.read(self.runtime.get, job_id)
        if view is None:
            holds = isinstance(self.runtime.queue, WorkflowJobQueue)
            if holds and await self.backend.read(self.runtime.workflow, job_id) is not None:
                return self._redirect(request, f"/workflows/{job_id}")  # a workflow's id
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
                "args": args_text(view) if show_args else "",
                "result": pretty(view.job.result) if show_result and view.job else "",
                "progress": progress_text(view),
                "workflow": await self.workflow_of(job_id),
            },
        )

    async def dead(self, request: Request) -> Response:
        filters = self._filters(request, with_state=False)
        number = parse_page(request.query_params.get("page"))
        if isinstance(filters, HTMLResponse):
            return filters
        if isinstance(number, FieldError):
            return self._error(request, 400, f"{number.field}: {number.reason}")

        page, total = await self.backend.read(dead_listing, self.runtime, filters, number)
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
        filters = self._filters(request, with_state=False)
        if isinstance(filters, HTMLResponse):
            return filters
        what = request.query_params.get("action", "")
        if what not in ("retry", "purge"):
            return self._error(request, 400, "action: must be retry or purge")
        count = await self.backend.read(count_dead, self.runtime, filters)
        return self._render(
            request,
            "dead_confirm.html",
            {
                "title": "Confirm",
                "page": "dead",
                "filters": filters,
                "action": what,
                "count": min(count, BULK_LIMIT),
                "more": count > BULK_LIMIT,
                "as_of": confirmed_at(self.runtime.clock.now()),
            },
        )

    async def dead_purge_confirm(self, request: Request) -> Response:
        """What one Purge button leads to: the dead letter, and the button that purges."""
        job_id = parse_job_id(request.query_params.get("job_id", ""))
        if isinstance(job_id, FieldError):
            return self._error(request, 404, f"No dead letter: {job_id.reason}.")
        view = await self.backend.read(self.runtime.get, job_id)
        if view is None or not view.dead:
            return self._error(request, 404, f"{job_id} is not a dead letter.")
        return self._render(
            request, "purge_confirm.html", {"title": "Confirm", "page": "dead", "view": view}
        )

    async def workers(self, request: Request) -> Response:
        rows, running = await self.backend.read(views_workers, self.runtime)
        return self._render(
            request,
            "workers.html",
            {"title": "Workers", "page": "workers", "workers": rows, "running": running},
        )

    async def limits(self, request: Request) -> Response:
        now = self.runtime.clock.now()
        reports = await self.backend.read(self.runtime.limit_reports, now)
        return self._render(
            request,
            "limits.html",
            {"title": "Limits", "page": "limits", "reports": reports, "now": now},
        )

    async def cron(self, request: Request) -> Response:
        rows = await self.backend.read(self.runtime.cron.list)
        return self._render(request, "cron.html", {"title": "Cron", "page": "cron", "rows": rows})


def create_app(
    runtime: Runtime,
    *,
    read_only: bool = False,
    auth: AuthHook | None = None,
    live_every_s: float = 3.0,
    csrf_secret: bytes | str | None = None,
    trusted_origins: Iterable[str] = (),
    login_throttle: LoginThrottle | None = None,
    backend_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ASGIApp:
    """The dashboard as an ASGI app over `runtime`, to serve on its own (`conveyor
    dashboard`) or mount in another ASGI app (for example Starlette's `Mount`).

    `read_only` refuses every action with 403. `auth` is called with each request
    (a Starlette `Request`) and must return True to let it through; `BasicAuth(user,
    password)` is the simple case. `/healthz` answers without it, for probes. The
    overview refreshes its figures every `live_every_s` seconds.

    `csrf_secret` signs the forms' CSRF tokens (at least 16 bytes; random per process
    when None, so a restart asks open pages to reload); give every process behind one
    address the same one. `trusted_origins` (`"https://ops.example.com"`) are other
    origins whose pages may post actions, for a proxy that rewrites the `Host` header.
    `login_throttle` (default: 5 failed logins a minute per client address) brakes
    password guessing. A page whose read of the backend fails because the server is
    unreachable, or takes longer than `backend_timeout_s`, is a 503 saying so."""
    dashboard = Dashboard(
        runtime,
        read_only=read_only,
        auth=auth,
        live_every_s=live_every_s,
        csrf_secret=csrf_secret,
        trusted_origins=trusted_origins,
        login_throttle=login_throttle,
        backend_timeout_s=backend_timeout_s,
    )
    return SecurityHeaders(Starlette(routes=dashboard.routes()))
