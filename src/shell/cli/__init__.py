"""The `conveyor` command line: `main` parses and dispatches (`cli.command`); each
command family lives in a module of its own (`worker`, `enqueue`, `status`, `jobs`,
`dead`, `cron`, `maintenance`, `dashboard`, `demo`), over the shared helpers in
`cli.runtime`."""

from .command import main

__all__ = ["main"]
