"""The dashboard's workflow page on every backend, through Starlette's test client: the
graph shows every member with its state and every dependency as an arrow, a member's
job page links back, and the cancel action cancels, refused as every action is
without its token, from another origin, or on a read-only dashboard."""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID, uuid4

import attrs
import conveyor
import pytest
from backends import Backend
from conveyor import JobStatus, Workflow, dep
from conveyor.dashboard import CSRF_COOKIE, CSRF_FIELD, BasicAuth
from conveyor.shell.config import Config
from conveyor.shell.registry import Registry
from conveyor.shell.runtime import Runtime
from starlette.testclient import TestClient

NODE = re.compile(
    r'<g class="node ([^"]*)" data-job="([^"]+)" data-state="([^"]+)" data-layer="(\d+)">'
)
EDGE = re.compile(
    r'<g class="edge[^"]*" data-from="([^"]+)" data-to="([^"]+)"(?: data-policy="([^"]+)")?>'
)
CSRF_META = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


def ok(args: dict[str, Any]) -> str:
    return "done"


def declined(args: dict[str, Any]) -> None:
    raise conveyor.Permanent("card declined <script>window.__xss=1</script>")


def dashboard(rt: Runtime, **options: Any) -> Any:
    """The dashboard app, its reads given 30 s instead of 2: a busy machine must not turn
    a page under test into the "not answered" page (test_dashboard_outage.py tests the
    deadline)."""
    from conveyor.dashboard import create_app

    options.setdefault("backend_timeout_s", 30.0)
    return create_app(rt, **options)


@pytest.fixture
def rt(backend: Backend) -> Runtime:
    config = Config(provider="memory", workers=attrs.evolve(Config().workers, queues=("default",)))
    return Runtime(config, backend.queue, backend.store, Registry({"ok": ok, "declined": declined}))


@attrs.frozen
class Shape:
    """A workflow of six: two roots, one that fails, and dependents under each policy."""

    workflow_id: UUID
    ids: dict[str, UUID]


def shape(rt: Runtime) -> Shape:
    """fetch and charge are roots (charge fails when run); render waits for fetch;
    refund waits for charge (fail); mail for charge (skip) and render; audit for charge
    (ignore) and render."""
    wf = Workflow()
    fetch = wf.add("ok", name="fetch")
    charge = wf.add("declined", name="charge", max_retries=0)
    render = wf.add("ok", after=[fetch], name="render")
    wf.add("ok", after=[charge], name="refund")
    wf.add("ok", after=[dep(charge, on_failure="skip"), render], name="mail")
    wf.add("ok", after=[dep(charge, on_failure="ignore"), render], name="audit")
    workflow_id = rt.enqueue(wf)
    state = rt.workflow(workflow_id)
    assert state is not None
    return Shape(workflow_id, {m.name: m.job_id for m in state.members})


def nodes(page: str) -> dict[str, tuple[str, str, int]]:
    """Each box of the graph: job id -> (classes, state, layer)."""
    return {job: (cls, state, int(layer)) for cls, job, state, layer in NODE.findall(page)}


def edges(page: str) -> dict[tuple[str, str], str]:
    """Each arrow of the graph: (dependency, dependent) -> its policy ("" for fail)."""
    return {(a, b): policy for a, b, policy in EDGE.findall(page)}


def token(client: TestClient, path: str = "/") -> str:
    found = CSRF_META.search(client.get(path).text)
    assert found is not None and client.cookies.get(CSRF_COOKIE)
    return found.group(1)


def cancel(client: TestClient, workflow_id: object, **headers: str) -> Any:
    form = {CSRF_FIELD: token(client)}
    return client.post(
        f"/workflows/{workflow_id}/cancel", data=form, headers=headers, follow_redirects=False
    )


def states(rt: Runtime, workflow_id: UUID) -> dict[str, JobStatus | None]:
    found = rt.workflow(workflow_id)
    assert found is not None
    return {m.name: m.state for m in found.members}


# ---- the page -------------------------------------------------------------------------


def test_the_page_draws_every_member_with_its_state_in_layers(rt: Runtime) -> None:
    wf = shape(rt)
    page = TestClient(dashboard(rt)).get(f"/workflows/{wf.workflow_id}")
    assert page.status_code == 200
    assert f"Workflow <code>{wf.workflow_id}</code>" in page.text
    drawn = nodes(page.text)
    expected_layers = {"fetch": 0, "charge": 0, "render": 1, "refund": 1, "mail": 2, "audit": 2}
    assert {job: (state, layer) for job, (_, state, layer) in drawn.items()} == {
        str(wf.ids[name]): ("pending" if layer == 0 else "waiting", layer)
        for name, layer in expected_layers.items()
    }
    for name, job_id in wf.ids.items():
        assert f'href="/jobs/{job_id}"' in page.text
        assert f"<td>{name}</td>" in page.text


def test_the_states_drawn_follow_the_jobs_as_they_run(rt: Runtime) -> None:
    wf = shape(rt)
    rt.drain()
    page = TestClient(dashboard(rt)).get(f"/workflows/{wf.workflow_id}").text
    drawn = {job: state for job, (_, state, _) in nodes(page).items()}
    assert drawn == {
        str(wf.ids["fetch"]): "completed",
        str(wf.ids["charge"]): "failed",
        str(wf.ids["render"]): "completed",
        str(wf.ids["refund"]): "cancelled",
        str(wf.ids["mail"]): "skipped",
        str(wf.ids["audit"]): "completed",
    }
    # The summary counts a skipped job as the graph draws it (it said "2 cancelled").
    summary = re.search(r'<p id="counts">(.*?)</p>', page)
    assert summary is not None
    spans = re.findall(r'<span class="state (\w+)">(\d+) \1</span>', summary.group(1))
    assert dict(spans) == {"completed": "3", "failed": "1", "cancelled": "1", "skipped": "1"}
    # The workflow as a whole: every job ended, one of them a dead letter.
    assert '<span class="state failed" id="workflow-state">failed</span>' in summary.group(1)
    # A finished workflow has nothing left to cancel; the error is shown as text.
    assert "cancel-workflow" not in page
    assert "<script>window.__xss=1</script>" not in page
    assert "card declined &lt;script&gt;" in page


def test_the_arrows_are_the_edges_with_their_policies_when_not_the_default(
    rt: Runtime,
) -> None:
    wf = shape(rt)
    page = TestClient(dashboard(rt)).get(f"/workflows/{wf.workflow_id}").text
    i = {name: str(job_id) for name, job_id in wf.ids.items()}
    assert edges(page) == {
        (i["fetch"], i["render"]): "",
        (i["charge"], i["refund"]): "",
        (i["charge"], i["mail"]): "skip",
        (i["render"], i["mail"]): "",
        (i["charge"], i["audit"]): "ignore",
        (i["render"], i["audit"]): "",
    }
    # The same edges as `conveyor workflow show` reads them.
    state = rt.workflow(wf.workflow_id)
    assert state is not None
    shown = {(wf.ids[d], m.job_id, p) for m in state.members for d, p in m.waits_for}
    assert {(UUID(a), UUID(b), p or "fail") for (a, b), p in edges(page).items()} == shown


def test_a_job_outside_the_workflow_that_a_member_waits_for_is_drawn_apart(
    rt: Runtime,
) -> None:
    before = rt.enqueue("ok")
    wf = Workflow()
    wf.add("ok", after=[before], name="after-it")
    workflow_id = rt.enqueue(wf)
    page = TestClient(dashboard(rt)).get(f"/workflows/{workflow_id}").text
    classes, state, layer = nodes(page)[str(before.id)]
    assert "outside" in classes.split() and (state, layer) == ("pending", 0)
    assert f'href="/jobs/{before.id}"' in page
    assert len(edges(page)) == 1


def test_a_long_name_is_cut_in_its_box_and_whole_in_its_tooltip(rt: Runtime) -> None:
    long = "reports.render-the-quarterly-summary-for-every-region"
    wf = Workflow()
    handle = wf.add("ok", name=long)
    page = TestClient(dashboard(rt)).get(f"/workflows/{rt.enqueue(wf)}").text
    assert f'<text class="name" x="18" y="28">{long[:25]}…</text>' in page
    assert f"<title>{long} ({handle.job_id}): pending</title>" in page


def test_an_unknown_workflow_is_a_404_page(rt: Runtime) -> None:
    client = TestClient(dashboard(rt))
    missing = uuid4()
    for path, shown in ((missing, str(missing)), ("not-an-id", "not-an-id")):
        answer = client.get(f"/workflows/{path}")
        assert answer.status_code == 404
        assert f"No workflow &#39;{shown}&#39;" in answer.text
    assert cancel(client, missing).status_code == 404


def test_a_members_job_page_links_back_to_its_workflow(rt: Runtime) -> None:
    wf = shape(rt)
    client = TestClient(dashboard(rt))
    for job_id in wf.ids.values():
        page = client.get(f"/jobs/{job_id}").text
        assert f'<a id="workflow-link" href="/workflows/{wf.workflow_id}">' in page


def test_a_job_of_no_workflow_links_to_none(rt: Runtime) -> None:
    wf = shape(rt)
    alone = rt.enqueue("ok")
    after = rt.enqueue("ok", after=[wf.ids["fetch"]])
    client = TestClient(dashboard(rt))
    for job_id in (alone.id, after.id):
        page = client.get(f"/jobs/{job_id}")
        assert page.status_code == 200 and "workflow-link" not in page.text


def test_the_overview_counts_the_jobs_that_wait_per_queue(rt: Runtime) -> None:
    shape(rt)
    page = TestClient(dashboard(rt)).get("/").text
    row = re.search(r'<tr data-queue="default"[^>]*>(.*?)</tr>', page, re.S)
    assert row is not None
    assert '<td class="num waiting">4</td>' in row.group(1)
    assert '<td class="num ready">2</td>' in row.group(1)


# ---- the cancel action ----------------------------------------------------------------


def test_cancel_cancels_every_unfinished_member(rt: Runtime) -> None:
    wf = shape(rt)
    client = TestClient(dashboard(rt))
    answer = cancel(client, wf.workflow_id)
    assert answer.status_code == 303
    where = answer.headers["location"]
    assert where.startswith(f"/workflows/{wf.workflow_id}?done=wf-cancelled&n=6&seal=")
    assert set(states(rt, wf.workflow_id).values()) == {JobStatus.CANCELLED}
    page = client.get(where).text
    assert "Cancelled the workflow&#39;s 6 unfinished job(s)" in page
    assert {state for _, state, _ in nodes(page).values()} == {"cancelled"}


def test_a_finished_workflow_with_a_purged_member_offers_no_cancel(rt: Runtime) -> None:
    # A member whose record is gone counted as unfinished: the button came back, and
    # each click said it "cancelled 1 unfinished job" while nothing changed.
    wf = Workflow()
    wf.add("declined", name="charge", max_retries=0)
    wf.add("ok", name="fetch")
    workflow_id = rt.enqueue(wf)
    rt.drain()
    client = TestClient(dashboard(rt))
    assert 'id="cancel-workflow"' not in client.get(f"/workflows/{workflow_id}").text
    (dead,) = rt.list_dead()
    assert rt.purge_dead(dead.id) == 1
    assert 'id="cancel-workflow"' not in client.get(f"/workflows/{workflow_id}").text
    answer = cancel(client, workflow_id)
    assert "done=wf-cancelled&n=0&" in answer.headers["location"]


def test_cancel_without_the_csrf_token_is_refused(rt: Runtime) -> None:
    wf = shape(rt)
    client = TestClient(dashboard(rt))
    client.get("/")  # the cookie, without the form's token
    for form in ({}, {CSRF_FIELD: "forged"}):
        answer = client.post(
            f"/workflows/{wf.workflow_id}/cancel", data=form, follow_redirects=False
        )
        assert answer.status_code == 403 and "CSRF token" in answer.text
    assert JobStatus.CANCELLED not in states(rt, wf.workflow_id).values()


@pytest.mark.parametrize(
    "headers",
    [{"origin": "http://evil.example"}, {"sec-fetch-site": "cross-site"}],
)
def test_cancel_from_another_origin_is_refused_with_a_valid_token(
    rt: Runtime, headers: dict[str, str]
) -> None:
    wf = shape(rt)
    answer = cancel(TestClient(dashboard(rt)), wf.workflow_id, **headers)
    assert answer.status_code == 403 and "another origin" in answer.text
    assert JobStatus.CANCELLED not in states(rt, wf.workflow_id).values()


def test_cancel_is_refused_and_not_offered_when_the_dashboard_is_read_only(
    rt: Runtime,
) -> None:
    wf = shape(rt)
    client = TestClient(dashboard(rt, read_only=True))
    page = client.get(f"/workflows/{wf.workflow_id}").text
    assert "cancel-workflow" not in page and 'method="post"' not in page
    assert len(nodes(page)) == 6
    answer = cancel(client, wf.workflow_id)
    assert answer.status_code == 403 and "read-only" in answer.text
    assert JobStatus.CANCELLED not in states(rt, wf.workflow_id).values()


def test_the_page_asks_for_login_as_every_page_does(rt: Runtime) -> None:
    wf = shape(rt)
    client = TestClient(dashboard(rt, auth=BasicAuth("ops", "s3cret")))
    assert client.get(f"/workflows/{wf.workflow_id}").status_code == 401
    assert client.post(f"/workflows/{wf.workflow_id}/cancel").status_code == 401
    page = client.get(f"/workflows/{wf.workflow_id}", auth=("ops", "s3cret"))
    assert page.status_code == 200 and len(nodes(page.text)) == 6
    assert JobStatus.CANCELLED not in states(rt, wf.workflow_id).values()
