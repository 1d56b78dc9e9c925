"""Build hooks for mkdocs.yml.

Some pages link to files outside docs/ (the benchmark chart in benchmarks/results/), which
GitHub resolves from the repository. The site copies each such file under `repo/` and
points the links there, so `mkdocs build --strict` can still check every other link.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

# Repository paths, relative to the project root, that pages link to as `../<path>`.
OUTSIDE_DOCS = ("benchmarks/results/latest.png",)


def on_files(files: Files, config: Any) -> Files:
    root = Path(config.config_file_path).parent
    for rel in OUTSIDE_DOCS:
        files.append(File.generated(config, f"repo/{rel}", abs_src_path=str(root / rel)))
    return files


def on_page_markdown(markdown: str, **_: Any) -> str:
    for rel in OUTSIDE_DOCS:
        markdown = markdown.replace(f"](../{rel})", f"](repo/{rel})")
    return markdown
