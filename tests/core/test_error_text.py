"""An error's message and traceback are bounded, and every cut is marked; a cut
traceback keeps its stack frames and cuts the exception messages inside it."""

from __future__ import annotations

import traceback

from conveyor.core import (
    MAX_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    ErrorInfo,
    cap_message,
    cap_traceback,
)
from hypothesis import given
from hypothesis import strategies as st


def formatted(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def raise_deep(depth: int, message: str) -> None:
    if depth == 0:
        raise ValueError(message)
    raise_deep(depth - 1, message)


def caught(depth: int, message: str) -> BaseException:
    try:
        raise_deep(depth, message)
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


def test_a_message_that_fits_is_kept_whole() -> None:
    assert cap_message("x" * MAX_MESSAGE_CHARS) == "x" * MAX_MESSAGE_CHARS


def test_a_long_message_is_cut_behind_a_marker_saying_how_much_went() -> None:
    kept = cap_message("x" * 10_000)
    assert len(kept) <= MAX_MESSAGE_CHARS
    head, _, marker = kept.partition(" [... ")
    assert marker == f"{10_000 - len(head)} more characters cut]"


@given(st.text(min_size=0, max_size=5000))
def test_a_cut_message_always_fits_and_keeps_its_start(text: str) -> None:
    kept = cap_message(text)
    assert len(kept) <= MAX_MESSAGE_CHARS
    if kept != text:
        assert text.startswith(kept.rsplit(" [... ", 1)[0])


def test_an_error_record_cuts_its_message_with_a_marker() -> None:
    error = ErrorInfo("ValueError", "y" * 5000)
    assert len(error.message) <= MAX_MESSAGE_CHARS
    assert error.message.endswith("more characters cut]")


def test_a_traceback_with_a_huge_message_keeps_every_frame() -> None:
    exc = caught(5, "z" * 20_000)
    text = formatted(exc)
    kept = cap_traceback(text)
    assert kept is not None and len(kept) <= MAX_TRACEBACK_CHARS
    frames = [line for line in text.splitlines() if line.startswith("  File ")]
    assert "in caught" in frames[0] and "in raise_deep" in frames[-1]
    assert [line for line in kept.splitlines() if line.startswith("  File ")] == frames
    assert kept.startswith("Traceback (most recent call last):\n")
    assert "ValueError: zzz" in kept
    cut = len(text) - len(kept)
    assert "more characters of this message cut ...]" in kept
    assert cut > 0


def test_each_exception_of_a_chain_keeps_its_frames_and_its_cut_is_marked() -> None:
    try:
        try:
            raise_deep(2, "first " + "a" * 9000)
        except ValueError as inner:
            raise RuntimeError("second " + "b" * 9000) from inner
    except RuntimeError as exc:
        text = formatted(exc)
    kept = cap_traceback(text)
    assert kept is not None and len(kept) <= MAX_TRACEBACK_CHARS
    assert kept.count("more characters of this message cut ...]") == 2
    assert "ValueError: first aaa" in kept and "RuntimeError: second bbb" in kept
    assert "The above exception was the direct cause of the following exception:" in kept
    frames = [line for line in text.splitlines() if line.startswith("  File ")]
    assert [line for line in kept.splitlines() if line.startswith("  File ")] == frames


def test_a_stack_too_deep_to_fit_keeps_its_end_behind_a_marker() -> None:
    frames = "".join(f'  File "app.py", line {i}, in step_{i}\n    step_{i + 1}()\n' for i in range(300))
    text = f"Traceback (most recent call last):\n{frames}ValueError: deep\n"
    kept = cap_traceback(text)
    assert kept is not None and len(kept) <= MAX_TRACEBACK_CHARS
    assert kept.startswith("[... the first ")
    assert kept.endswith("ValueError: deep\n")
