"""A workflow's id on the job page (the link `cron`'s page gives a workflow entry's
last run, or one typed by hand) leads to the workflow's page, not to a 404."""

from __future__ import annotations

import conveyor
from conveyor import Workflow
from test_dashboard import client_for


def test_a_workflow_id_on_the_job_page_leads_to_the_workflow_page() -> None:
    rt = conveyor.build({"provider": "memory"}, handlers={"ok": lambda args: None})
    wf = Workflow()
    first = wf.add("ok", {})
    wf.add("ok", {}, after=[first])
    workflow_id = rt.enqueue(wf)
    client = client_for(rt)
    answer = client.get(f"/jobs/{workflow_id}", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"].endswith(f"/workflows/{workflow_id}")
    assert client.get(f"/jobs/{workflow_id}").status_code == 200
    unknown = client.get("/jobs/00000000-0000-4000-8000-000000000000", follow_redirects=False)
    assert unknown.status_code == 404
    rt.close()
