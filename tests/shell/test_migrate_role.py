"""`conveyor migrate` run as a role that may not create tables says that migrate
needs one that may (the tables' owner), not only the driver's "permission denied"."""

from __future__ import annotations

import pytest
from conveyor.shell.migrate import migrate
from conveyor.shell.redact import BackendError
from test_sql_grants import owner_url, role_url

__all__ = ["owner_url", "role_url"]  # the fixtures, used by name


def test_migrate_as_a_role_that_may_not_create_tables_says_what_it_needs(role_url: str) -> None:
    with pytest.raises(BackendError) as refused:
        migrate({"provider": "db", "url": role_url, "entry_points": False})
    said = str(refused.value)
    assert "permission denied" in said
    assert "conveyor migrate needs a role that may create tables" in said, said
