"""The `conveyor` command line."""

from __future__ import annotations

import argparse
import sys

from .. import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="conveyor", description="Conveyor background jobs.")
    parser.add_argument("--version", action="version", version=f"conveyor {__version__}")
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
