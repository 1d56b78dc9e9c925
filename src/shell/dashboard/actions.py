"""The dashboard's actions: cancel a job, retry or purge dead letters, run a cron entry.

Each is a call to the runtime's own operator action (`Runtime.cancel`,
`retry_dead`, `purge_dead`, `cron.run`), made in a worker thread by
`reachability.BackendReads.act`, so the dashboard behaves as the CLI does on every
backend. `Actions` is mixed into `app.Dashboard`, which checks each request first
(`gate.Gate`) and answers with its own pages.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ...core import CancelResult, FieldError, ValidationError
from ...core.validation import parse_job_id
from ..runtime import Runtime
from ..terminal import shown
from .csrf import CsrfGuard
from .reachability import BackendReads
from .views import Filters, matching_dead, parse_filters, whole_number

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: What a redirect after an action reports, by the `done` code in its query string.
NOTICES = {
    "retried": "Retried {n} dead letter(s): they are queued again.",
    "purged": "Purged {n} dead letter(s).",
    "cancelled": "Cancelled the job.",
    "requested": "Asked the running job to stop: it is recorded cancelled when it returns.",
    "ran": "Enqueued the cron entry's job now.",
    "wf-cancelled": "Cancelled the workflow's {n} unfinished job(s) (a running one as it returns).",
}


def notice_of(path: str, params: Mapping[str, str], guard: CsrfGuard) -> str:
    """The line a redirect's `done` and `n` ask the page at `path` (within the
    dashboard) to show: "" for none, and for a notice this server did not seal for
    that page (a link cannot claim an action, nor carry one action's notice to
    another page). `n` is only a count to report: one that is no plain number reads
    as 1."""
    done, given = params.get("done", ""), params.get("n", "")
    if not hmac.compare_digest(params.get("seal", ""), _seal(guard, path, done, given)):
        return ""
    count = whole_number(given or "1")
    return NOTICES.get(done, "").format(n=1 if count is None else count)


def sealed(path: str, params: dict[str, Any], guard: CsrfGuard) -> dict[str, Any]:
    """The query of a redirect to `path` with its notice sealed (see `notice_of`)."""
    if "done" not in params:
        return params
    return {**params, "seal": _seal(guard, path, params["done"], params.get("n", ""))}


def _seal(guard: CsrfGuard, path: str, done: object, count: object) -> str:
    return guard.seal(f"{path}\n{done}:{count}")


class Actions:
    """The action endpoints of `app.Dashboard` (mixed into it)."""

    runtime: Runtime
    backend: BackendReads

    def _redirect(self, request: Request, path: str, **params: Any) -> Response:
        raise NotImplementedError  # the dashboard's

    def _error(self, request: Request, status: int, message: str) -> HTMLResponse:
        raise NotImplementedError  # the dashboard's

    async def cancel(self, request: Request, form: dict[str, str]) -> Response:
        job_id = request.path_params["job_id"]
        result = await self.backend.act(self.runtime.cancel, job_id)
        if result is CancelResult.CANCELLED:
            return self._redirect(request, f"/jobs/{job_id}", done="cancelled")
        if result is CancelResult.REQUESTED:
            return self._redirect(request, f"/jobs/{job_id}", done="requested")
        return self._error(request, 409, f"Job {job_id} has finished or is unknown: not cancelled.")

    async def dead_retry(self, request: Request, form: dict[str, str]) -> Response:
        job_id = parse_job_id(form.get("job_id", ""))
        if isinstance(job_id, FieldError):
            raise ValidationError((job_id,))
        try:
            job = await self.backend.act(self.runtime.retry_dead, job_id)
        except ValidationError as refused:  # the job's state, as a purge's 409 says
            return self._error(request, 409, str(refused))
        return self._redirect(request, f"/jobs/{job.id}", done="retried", n=1)

    async def dead_purge(self, request: Request, form: dict[str, str]) -> Response:
        job_id = form.get("job_id", "")
        if not job_id:
            raise ValidationError.of("job_id", "give the dead letter to purge")
        purged = await self.backend.act(self.runtime.purge_dead, job_id)
        if purged == 0:
            return self._error(request, 409, f"{job_id} is not a dead letter: nothing purged.")
        return self._redirect(request, "/dead", done="purged", n=purged)

    async def dead_bulk(self, request: Request, form: dict[str, str]) -> Response:
        filters = parse_filters(form, with_state=False)
        if isinstance(filters, FieldError):
            raise ValidationError((filters,))
        what = form.get("action", "")
        if what not in ("retry", "purge"):
            raise ValidationError.of("action", "must be retry or purge")
        as_of = _as_of(form.get("as_of"))
        count = await self.backend.act(self._bulk, what, filters, as_of)
        done = "retried" if what == "retry" else "purged"
        return self._redirect(request, "/dead", done=done, n=count, **filters.query())

    def _bulk(self, what: str, filters: Filters, as_of: datetime | None) -> int:
        """`what` on the dead letters the confirmation counted: at most `BULK_LIMIT`,
        and none that died after it (`as_of`), which the operator never saw."""
        done = 0
        for job in matching_dead(self.runtime, filters):
            if as_of is not None and (job.finished_at is None or job.finished_at > as_of):
                continue
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
        job = await self.backend.act(self.runtime.cron.run, form.get("name", ""))
        return self._redirect(request, f"/jobs/{job.id}", done="ran")


def confirmed_at(now: datetime) -> str:
    """The moment a bulk confirmation counted, as its form carries it (µs since 1970)."""
    return str((now - EPOCH) // timedelta(microseconds=1))


def _as_of(value: str | None) -> datetime | None:
    """The form's `as_of` (see `confirmed_at`); None when none was sent."""
    if value is None:
        return None
    if not (value.isascii() and value.isdigit() and len(value) <= 20):
        raise ValidationError.of("as_of", f"must be the confirmation's moment, got {shown(value)}")
    try:
        return EPOCH + timedelta(microseconds=int(value))
    except OverflowError:  # past the year 9999: no confirmation's moment either
        problem = f"must be the confirmation's moment, got {shown(value)}"
        raise ValidationError.of("as_of", problem) from None
