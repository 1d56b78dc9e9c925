"""The SQL backend's package: the module names of earlier versions still import, with
the same objects, and the wake-up listener tells its failures through the process's
view of the server it is handed, without importing the layers above the adapters."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from conveyor.shell import outage
from conveyor.shell.adapters import sql
from conveyor.shell.adapters.sql.migration import create_tables
from conveyor.shell.adapters.sql.wakeups import wakeups_for

#: Every name the modules `sql_schema` and `sql_engine` offered before they moved.
OLD_NAMES = {
    "conveyor.shell.adapters.sql_schema": (
        "ADDED_COLUMNS AUTOVACUUM_SETTINGS DEFAULT_PREFIX JOB_COUNTER NOTIFY_CHANNEL "
        "PROCESSING PROMOTE_PER_CLAIM QUEUE_FILLFACTOR READY SCHEDULED SCHEMA "
        "STORE_COUNTER Schema add_limit_columns claim_ddl claim_function_name "
        "create_tables ddl_text fill_limit_columns_sql make_schema metadata migrate "
        "notify_ddl partial_index_ddl schema_is_current schema_mark schema_problem "
        "schema_version storage_ddl"
    ),
    "conveyor.shell.adapters.sql_engine": (
        "SQLITE_BEGIN_OPTION Database configure_sqlite from_micros is_transient "
        "make_engine normalize_url to_micros"
    ),
    "conveyor.shell.adapters.sql": (
        "SQLITE_BEGIN_OPTION SQLITE_WATCH_S BadClaim SqlJobQueue SqlJobStore "
        "configure_sqlite from_micros make_engine normalize_url to_micros"
    ),
}


@pytest.mark.parametrize("module", sorted(OLD_NAMES))
def test_the_module_names_of_earlier_versions_offer_every_name_they_had(module: str) -> None:
    found = importlib.import_module(module)
    missing = [name for name in OLD_NAMES[module].split() if not hasattr(found, name)]
    assert missing == []


def test_the_old_module_names_hand_out_the_package_s_own_objects() -> None:
    from conveyor.shell.adapters import sql_engine, sql_schema
    from conveyor.shell.adapters.sql import database, ddl, migration, schema

    assert sql_schema.migrate is migration.migrate
    assert sql_schema.SCHEMA is schema.SCHEMA
    assert sql_schema.ddl_text is ddl.ddl_text
    assert sql_engine.make_engine is sql.make_engine
    assert sql_engine.Database is database.Database


def test_a_queue_s_wake_up_listener_reports_to_the_state_of_its_server(tmp_path: Path) -> None:
    engine = sql.make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    create_tables(engine)
    queue = sql.SqlJobQueue(engine)
    try:
        assert isinstance(queue, outage.ReportsOutages)
        state = outage.for_queue(queue)
        assert wakeups_for(engine)._watch is state
    finally:
        queue.close()
