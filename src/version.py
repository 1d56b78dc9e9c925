"""The release this source is, as `conveyor --version` prints it.

A module of its own so that the shell can name the version (the CLI, tracing)
without importing the package's front, which names the shell.
"""

from __future__ import annotations

#: The newest release in CHANGELOG.md, which `conveyor --version` prints; a release
#: moves both together (the tests hold them to each other and to pyproject.toml).
__version__ = "0.3.0"
