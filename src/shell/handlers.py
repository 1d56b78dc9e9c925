"""Handler contributions: modules that bring their own `{job_type: handler}` mapping.

A config lists `"package.module:attr"` strings; `attr` is a mapping of job type
to handler, or a callable returning one. Installed packages can contribute
through the `conveyor.handlers` entry-point group the same way. Only these
configured names are ever imported: nothing in a job payload names code.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..core import FieldError, ValidationError
from .registry import Registry


def _contribution(where: str, value: Any) -> Mapping[str, Callable[..., Any]] | Registry:
    if not isinstance(value, Mapping | Registry) and callable(value):
        if _takes_arguments(value):
            # A handler (or task) named in place of its collection: calling it here
            # would run the application's code, with no args, as the config loads.
            raise ValidationError.of(
                where,
                f"names {getattr(value, '__name__', type(value).__name__)!r}, which takes "
                "arguments, as a handler does: name the mapping, Tasks collection or "
                "Registry that holds it (or a function of no arguments returning one)",
            )
        value = value()
    if not isinstance(value, Mapping | Registry):
        raise ValidationError.of(
            where,
            "must be a mapping of job type to handler or a Registry (or return one), "
            f"got {type(value).__name__}",
        )
    return value


def _takes_arguments(value: Callable[..., Any]) -> bool:
    try:
        return bool(inspect.signature(value).parameters)
    except (TypeError, ValueError):  # no signature to read: call it, as before
        return False


def _mapping_of(where: str, value: Any) -> Mapping[str, Callable[..., Any]]:
    found = _contribution(where, value)
    if isinstance(found, Registry):
        raise ValidationError.of(where, "must be a mapping of job type to handler, got Registry")
    return found


def _register(
    registry: Registry, found: Mapping[str, Callable[..., Any]] | Registry
) -> Mapping[str, Callable[..., Any]] | None:
    """Register what one source contributes; the mapping, for `build` to bind the
    task collections among them (a registry brings its own registrations whole)."""
    if isinstance(found, Registry):
        registry.merge(found)
        return None
    for job_type, handler in found.items():
        registry.register(job_type, handler)
    return found


def _raised_importing(module_name: str, exc: Exception) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"importing {module_name!r} raised {type(exc).__name__}: {exc}{at}"


def import_attr(spec: str, where: str) -> Any:
    """Import `package.module:attr` named in the config (never from a payload)."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValidationError.of(where, f"cannot import {module_name!r}: {exc}") from None
    except Exception as exc:
        # The module's own code failed: say which module, what and where it raised.
        raise ValidationError.of(where, _raised_importing(module_name, exc)) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValidationError.of(
            where, f"module {module_name!r} has no attribute {attr!r}"
        ) from None


def load_spec(spec: str, where: str = "handlers") -> Mapping[str, Callable[..., Any]]:
    """Import `package.module:attr` and return its handler mapping."""
    return _mapping_of(where, import_attr(spec, where))


def contribute(
    registry: Registry,
    specs: Iterable[str] = (),
    *,
    entry_points: bool = True,
    group: str = "conveyor.handlers",
    loaded: list[Mapping[str, Callable[..., Any]]] | None = None,
) -> list[str]:
    """Register every contributed handler; returns the sources used, in order. Each
    mapping registered from is appended to `loaded` when given (`build` binds the
    `Tasks` collections among them)."""
    found: list[Mapping[str, Callable[..., Any]]] = [] if loaded is None else loaded
    sources: list[str] = []
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, spec in enumerate(specs):
        where = f"handlers[{i}]"
        if spec.strip() in seen:
            continue  # listed twice (a file and a variable, say): one collection, loaded once
        seen.add(spec.strip())
        try:
            mapping = _register(registry, _contribution(where, import_attr(spec, where)))
            if mapping is not None:
                found.append(mapping)
            sources.append(spec)
        except ValidationError as exc:
            errors.extend(_under(where, exc.errors))
        except ValueError as exc:
            errors.append(FieldError(where, str(exc)))
    if entry_points:
        for ep in importlib.metadata.entry_points(group=group):
            where = f"entry point {ep.name} ({ep.value})"
            try:
                mapping = _register(registry, _contribution(where, ep.load()))
                if mapping is not None:
                    found.append(mapping)
                sources.append(f"entry point {ep.name}")
            except ValidationError as exc:
                errors.extend(_under(where, exc.errors))
            except (ImportError, AttributeError, ValueError) as exc:
                errors.append(FieldError(where, str(exc)))
            except Exception as exc:
                errors.append(FieldError(where, _raised_importing(ep.value, exc)))
    if errors:
        raise ValidationError(errors)
    return sources


def _under(where: str, errors: Iterable[FieldError]) -> list[FieldError]:
    """`errors` named under `where` (a registration's "handler: for 'a' is not
    callable" becomes "handlers[0]: handler for 'a' is not callable")."""
    return [
        e if e.field.startswith(where) else FieldError(where, f"{e.field} {e.reason}")
        for e in errors
    ]
