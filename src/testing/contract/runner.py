"""Running the contract: one case on one subject (`run_case`, for a pytest
parametrization), or every case on fresh subjects with a report by case name
(`check`)."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping

import attrs

from ...shell.executor import Executor
from .case import Case
from .cases import CASES
from .subject import Difference, NotApplicable, Subject


def run_case(
    case: str | Case,
    subject: Subject,
    differences: Mapping[tuple[str, str], Difference] | None = None,
) -> None:
    """Run `case` (a name of `CASES`, or a `Case`) on `subject`.

    When `differences` declares one for (case, subject name), its `instead` runs in
    place of the case. A case needing what the subject lacks raises `NotApplicable`;
    a subject that does not hold to the case raises (an `AssertionError`, mostly).
    """
    found = CASES[case] if isinstance(case, str) else case
    declared = (differences or {}).get((found.name, subject.name))
    if declared is not None:
        declared.instead(subject)
        return
    missing = found.missing(subject)
    if missing:
        raise NotApplicable(found.name, missing)
    found(subject)


@attrs.frozen
class Report:
    """What `check` found: the cases `passed`, the `failures` (case name -> the
    traceback) and the cases `not_applicable` (case name -> what the subject lacks)."""

    passed: tuple[str, ...]
    failures: Mapping[str, str]
    not_applicable: Mapping[str, str]

    @property
    def ok(self) -> bool:
        """True when no case failed."""
        return not self.failures

    def __str__(self) -> str:
        lines = [
            f"{len(self.passed)} passed, {len(self.failures)} failed, "
            f"{len(self.not_applicable)} not applicable"
        ]
        lines.extend(f"FAILED {name}: {_why(text)}" for name, text in self.failures.items())
        lines.extend(f"n/a {name}: needs {why}" for name, why in self.not_applicable.items())
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raise an `AssertionError` naming every failed case, with its traceback."""
        if self.failures:
            details = "\n\n".join(f"--- {n}\n{t}" for n, t in self.failures.items())
            raise AssertionError(f"{self}\n\n{details}")


def _why(text: str) -> str:
    """The last line of a traceback; for a bare `AssertionError`, with the failing
    line of the case's source, so the report says which check failed."""
    lines = text.rstrip().splitlines()
    if not lines:
        return "failed"
    last = lines[-1]
    if last != "AssertionError":
        return last
    source = [
        line.strip()
        for line in lines[:-1]
        if line.startswith("    ") and line.strip() and not set(line.strip()) <= {"^", "~"}
    ]
    return f"{last} at `{source[-1]}`" if source else last


def check(
    factory: Callable[[], Subject],
    *,
    cases: Iterable[str | Case] | None = None,
    differences: Mapping[tuple[str, str], Difference] | None = None,
    executor: type[Executor] | None = None,
) -> Report:
    """Run `cases` (all of `CASES` by default), each on a fresh subject from
    `factory()`, cleaned up after it, and report by case name. `executor` replaces
    the subjects' executor (to check the cases against a broken one)."""
    passed: list[str] = []
    failures: dict[str, str] = {}
    not_applicable: dict[str, str] = {}
    for item in CASES.values() if cases is None else cases:
        found = CASES[item] if isinstance(item, str) else item
        subject = factory()
        if executor is not None:
            subject = attrs.evolve(subject, executor=executor)
        try:
            run_case(found, subject, differences)
        except NotApplicable as exc:
            not_applicable[found.name] = "; ".join(exc.missing)
        except Exception as exc:
            failures[found.name] = "".join(traceback.format_exception(exc))
        else:
            passed.append(found.name)
        finally:
            subject.cleanup()
    return Report(tuple(passed), failures, not_applicable)
