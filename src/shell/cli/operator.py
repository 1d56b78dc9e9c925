"""Which commands need the application's handler modules, and which do not.

An operator inspects and repairs jobs from wherever the config and the server are
reachable: a bastion host, a laptop, a container of the dashboard. The handler
modules (`handlers`, `CONVEYOR_HANDLERS`, the `conveyor.handlers` entry points) are
the application's code and are often not installed there. So the commands that
only read or act on stored jobs never import them: `status`, `dead ...`,
`job ...`, `jobs ...`, `cron ...`, `prune` and `dashboard`. `worker` runs the
handlers and must import them; `enqueue` imports them to catch a misspelt job type
(`--strict` refuses one), and runs without them when `CONVEYOR_HANDLERS` is set
empty and entry points are off.
"""

from __future__ import annotations

import attrs

from ..config import Config

#: The CLI commands that work on stored jobs alone and never import handler modules.
OPERATOR_COMMANDS = frozenset({"status", "dead", "job", "jobs", "cron", "prune", "dashboard"})


def without_handlers(config: Config) -> Config:
    """`config` with no handler module and no entry point to load."""
    return attrs.evolve(config, handlers=(), entry_points=False)
