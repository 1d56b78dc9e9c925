"""The SQL backend's schema as SQL text, and the schema mark that fingerprints it.

`ddl_text("postgresql")` prints the schema, mark included, as SQL for people who ship
their own migrations. The mark (`schema_mark`) is a digest of that text without
itself: `migrate` records it with the tables (a table comment on PostgreSQL, `PRAGMA
user_version` on SQLite), and every other process compares it with its own before
starting (see `migration`).
"""

from __future__ import annotations

import hashlib

from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.schema import CreateIndex, CreateSequence, CreateTable

from .postgres_ddl import claim_ddl, notify_ddl, partial_index_ddl, storage_ddl
from .schema import SCHEMA, Schema, dialect_of
from .upgrade import ADDED_COLUMNS, fill_limit_columns_sql


def schema_mark(dialect: str, schema: Schema = SCHEMA) -> str:
    """A fingerprint of the DDL this version wants: recorded with the tables when they are
    created or upgraded, so a process that finds it current runs no DDL at all."""
    digest = hashlib.sha256(_ddl_body(dialect_of(dialect), schema).encode()).hexdigest()
    return f"conveyor schema {digest[:16]}"


def sqlite_mark(mark: str) -> int:
    """The mark as SQLite records it: `PRAGMA user_version` holds a signed 32-bit
    integer, so a number from the mark's digest."""
    return int(hashlib.sha256(mark.encode()).hexdigest()[:7], 16)


def mark_label(found: str | int) -> str:
    """How a mark is shown to a person: the fingerprint's digits."""
    if isinstance(found, int):
        return f"{found:07x}"
    return found.removeprefix("conveyor schema ")


def schema_version(dialect: str, schema: Schema = SCHEMA) -> str:
    """This version's schema mark as messages show it (the digits of its fingerprint)."""
    mark = schema_mark(dialect, schema)
    return mark_label(mark if dialect == "postgresql" else sqlite_mark(mark))


def mark_statement(dialect: Dialect, schema: Schema) -> str:
    """The statement that records this version's mark with the tables."""
    mark = schema_mark(dialect.name, schema)
    if dialect.name == "postgresql":
        quoted = mark.replace("'", "''")
        return f"COMMENT ON TABLE {schema.job_queue.fullname} IS '{quoted}'"
    return f"PRAGMA user_version = {sqlite_mark(mark)}"


def _ddl_statements(target: Dialect, schema: Schema, if_not_exists: bool) -> list[str]:
    statements: list[str] = []
    if target.supports_sequences:
        for seq in (schema.job_seq, schema.store_seq):
            create = CreateSequence(seq, if_not_exists=if_not_exists)
            statements.append(str(create.compile(dialect=target)))
    if target.name == "postgresql":
        statements.extend(partial_index_ddl(schema))
    for table in schema.tables_for(target):
        create_table = CreateTable(table, if_not_exists=if_not_exists)
        statements.append(str(create_table.compile(dialect=target)).strip())
        if table is schema.job_queue and if_not_exists and target.name == "postgresql":
            # An upgrade of tables an earlier version made: the columns its indexes need.
            statements.extend(
                f"ALTER TABLE {table.name} ADD COLUMN IF NOT EXISTS {name} {kind}"
                for name, kind in ADDED_COLUMNS
            )
            statements.append(fill_limit_columns_sql(schema))
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            create_index = CreateIndex(index, if_not_exists=if_not_exists)
            statements.append(str(create_index.compile(dialect=target)))
    if target.name == "postgresql":
        statements.extend(notify_ddl(schema))
        statements.extend(claim_ddl(schema))
        statements.extend(storage_ddl(schema))
    return statements


def _join(statements: list[str]) -> str:
    # Compiled DDL has tab indents and trailing blanks; tidy it for a migration file.
    tidy = (
        "\n".join(line.rstrip().replace("\t", "    ") for line in s.splitlines())
        for s in statements
    )
    return "".join(f"{s};\n\n" for s in tidy)


def _ddl_body(target: Dialect, schema: Schema) -> str:
    """The schema without its mark: what the mark fingerprints."""
    return _join(_ddl_statements(target, schema, if_not_exists=False))


def ddl_text(
    dialect: str | Dialect, schema: Schema = SCHEMA, *, if_not_exists: bool = False
) -> str:
    """The schema's statements for `dialect` (`"postgresql"`, `"sqlite"` or a `Dialect`),
    one per paragraph, each ending in `;`: paste them into a migration. The last one
    records the schema mark, without which processes refuse to start on the tables.

    With `if_not_exists` every CREATE skips what exists (functions and the trigger are
    replaced anyway), so the text also upgrades a schema an earlier version made:
    `conveyor migrate --sql` prints it so.
    """
    target = dialect_of(dialect)
    statements = _ddl_statements(target, schema, if_not_exists)
    statements.append(mark_statement(target, schema))
    return _join(statements)
