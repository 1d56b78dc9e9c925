"""The rights an application role needs on PostgreSQL once the schema is migrated.

The owner runs `conveyor migrate`; the role every other process connects as
needs no CREATE right, only DML on the tables and USAGE on the sequences of the
schema. Both lists come from the schema itself (`Schema.tables_for`), so a table a
new feature adds is granted as soon as it exists: docs/sql.md shows `grant_sql("app")`
and a test holds it to that. Nothing else needs granting: the claim function runs
with the caller's rights and PUBLIC may execute functions, LISTEN/NOTIFY needs no
privilege, and the staging table of a bulk enqueue is temporary (PUBLIC has
TEMPORARY on a database unless it was revoked; without it a bulk enqueue takes
another path).

```python
from conveyor.shell.adapters.sql.grants import grant_sql

print(grant_sql("app"))
```
"""

from __future__ import annotations

import re
import textwrap

from ....core import ValidationError
from .schema import SCHEMA, Schema
from .schema import dialect_of as _dialect

#: The table privileges a role that enqueues, works and reports needs.
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")

#: A role name `grant_sql` writes unquoted.
_ROLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def grant_tables(schema: Schema = SCHEMA) -> tuple[str, ...]:
    """The tables a worker, an enqueuer and every operator command read and write on
    PostgreSQL, in the schema's order."""
    return tuple(table.name for table in schema.tables_for(_dialect("postgresql")))


def grant_sequences(schema: Schema = SCHEMA) -> tuple[str, ...]:
    """The sequences their inserts draw from."""
    return (schema.job_seq.name, schema.store_seq.name)


def grant_sql(role: str, schema: Schema = SCHEMA) -> str:
    """The GRANT statements that let `role` run everything but migrations."""
    if _ROLE.fullmatch(role) is None:
        raise ValidationError.of(
            "role", f"must be a plain SQL name (letters, digits, '_'), got {role!r}"
        )
    tables = textwrap.wrap(
        ", ".join(grant_tables(schema)) + f" TO {role};",
        width=80,
        initial_indent="    ON ",
        subsequent_indent="       ",
        break_on_hyphens=False,
    )
    sequences = ", ".join(grant_sequences(schema))
    return "\n".join(
        [
            f"GRANT {', '.join(TABLE_PRIVILEGES)}",
            *tables,
            f"GRANT USAGE ON SEQUENCE {sequences} TO {role};",
        ]
    )
