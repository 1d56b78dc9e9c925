"""How the job codec reads a field's declared type: `X | None` and `tuple[X, ...]`
are the two shapes its encoders and decoders take apart (see `codec`)."""

from __future__ import annotations

import types
import typing
from typing import Any, Union


def optional_of(kind: Any) -> Any:
    """`X` for `X | None`, else None."""
    if typing.get_origin(kind) in (Union, types.UnionType):
        rest = [arg for arg in typing.get_args(kind) if arg is not type(None)]
        if len(rest) == 1 and len(typing.get_args(kind)) == 2:
            return rest[0]
    return None


def items_of(kind: Any) -> Any:
    """`X` for `tuple[X, ...]`, else None."""
    if typing.get_origin(kind) is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
    return None
