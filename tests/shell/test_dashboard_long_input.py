"""A value the dashboard refuses is shown in part on its error page: a query or path
of thousands of characters is not repeated whole (a 5,000-digit page number made a
400 page of 5,800 bytes)."""

from __future__ import annotations

import re

import conveyor
import pytest
from starlette.testclient import TestClient
from test_dashboard import client_for

LONG = 5000


@pytest.fixture
def client() -> TestClient:
    return client_for(conveyor.build({"provider": "memory"}, handlers={"ok": lambda a: None}))


def message(page: str) -> str:
    main = re.search(r"<main.*?</main>", page, re.S)
    assert main is not None
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", main.group(0))).strip()


@pytest.mark.parametrize(
    ("path", "field", "status"),
    [
        (f"/jobs?page={'9' * LONG}", "page", 400),
        (f"/dead?page={'9' * LONG}", "page", 400),
        (f"/jobs?state={'x' * LONG}", "state", 400),
        (f"/workflows/{'a' * LONG}", "workflow", 404),
    ],
)
def test_a_long_value_refused_is_shown_cut_where_it_was_cut(
    client: TestClient, path: str, field: str, status: int
) -> None:
    answer = client.get(path)
    said = message(answer.text)
    assert answer.status_code == status and field in said
    assert len(said) < 300, said[:300]
    assert "..." in said, "the cut does not show"


def test_a_short_value_refused_is_shown_whole(client: TestClient) -> None:
    assert "got &#39;99999&#39;" in client.get("/jobs?page=99999").text
    assert "got &#39;done&#39;" in client.get("/jobs?state=done").text


def test_a_long_confirmation_moment_refused_is_shown_cut(client: TestClient) -> None:
    token = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text)
    assert token is not None
    answer = client.post(
        "/dead/bulk",
        data={"action": "purge", "as_of": "x" * LONG, "csrf_token": token.group(1)},
    )
    said = message(answer.text)
    assert answer.status_code == 400 and "as_of" in said
    assert len(said) < 300 and "..." in said, said[:300]
