"""Bounding an error's text: its message and its traceback, every cut marked.

A job record keeps the error of its last attempt and of each attempt before it, so
its size is bounded: a message to `MAX_MESSAGE_CHARS`, a traceback to
`MAX_TRACEBACK_CHARS`. Whatever is cut leaves a marker saying how much went, so an
operator never takes a cut text for the whole.

The useful part of a traceback is its stack: which frames led to the raise. A
handler that raises with a huge message (a response body, a query) used to push
every frame out when the traceback was cut from the start. So `cap_traceback`
cuts the exception *messages* inside the traceback first, each behind a marker,
and keeps the frames; only a stack that alone does not fit loses its oldest lines.
"""

from __future__ import annotations

#: The most characters of an error message a record keeps (the start, then a marker).
MAX_MESSAGE_CHARS = 2000

#: The most characters of a traceback a record keeps.
MAX_TRACEBACK_CHARS = 4000

#: The fewest characters of each exception message a cut traceback keeps.
_MIN_MESSAGE_KEPT = 200

_TRACEBACK_HEADER = "Traceback (most recent call last):"
_CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def cap_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` if it fits in `limit` characters, else its start and a marker saying how
    many characters were cut (the whole result fits)."""
    if len(text) <= limit:
        return text
    widest = len(_message_marker(len(text)))
    keep = max(0, limit - widest)
    return text[:keep] + _message_marker(len(text) - keep)


def _message_marker(cut: int) -> str:
    return f" [... {cut} more characters cut]"


def cap_traceback(text: str | None, limit: int = MAX_TRACEBACK_CHARS) -> str | None:
    """`text` if it fits in `limit`, else the same traceback with its exception messages
    cut (each behind a marker line) so that every frame stays; a stack too long even
    then keeps its last whole lines behind a marker saying how much was cut."""
    if text is None or len(text) <= limit:
        return text
    if _TRACEBACK_HEADER not in text:
        return _keep_tail(text, limit)  # no stack to keep: the end is what matters
    parts = _split(text)
    frames = sum(len(chunk) for is_message, chunk in parts if not is_message)
    messages = [chunk for is_message, chunk in parts if is_message]
    allowances = _share(limit - frames, [len(m) for m in messages])
    out: list[str] = []
    index = 0
    for is_message, chunk in parts:
        if is_message:
            out.append(_cut_block(chunk, allowances[index]))
            index += 1
        else:
            out.append(chunk)
    shortened = "".join(out)
    return shortened if len(shortened) <= limit else _keep_tail(shortened, limit)


def _split(text: str) -> list[tuple[bool, str]]:
    """The traceback as (is a message, text) chunks, in order: headers, frame lines and
    chain lines are the stack; the lines after a stack's last frame are its message."""
    parts: list[tuple[bool, str]] = []
    state = "top"
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if bare == _TRACEBACK_HEADER:
            state, is_message = "frames", False
        elif bare in _CHAIN_LINES:
            state, is_message = "top", False
        elif state == "frames" and line[:1] in (" ", "\t"):
            is_message = False
        else:
            state, is_message = "message", True
        if parts and parts[-1][0] == is_message:
            parts[-1] = (is_message, parts[-1][1] + line)
        else:
            parts.append((is_message, line))
    # Blank lines that close a message (before a chain line) belong to the stack.
    tidy: list[tuple[bool, str]] = []
    for is_message, chunk in parts:
        if is_message:
            body = chunk.rstrip("\n")
            trailing = chunk[len(body) + 1 :] if chunk.endswith("\n") else ""
            tidy.append((True, body + ("\n" if chunk.endswith("\n") else "")))
            if trailing:
                tidy.append((False, trailing))
        else:
            tidy.append((False, chunk))
    return tidy


def _share(budget: int, sizes: list[int]) -> list[int]:
    """Characters each message may keep, `budget` shared out fairly: a message shorter
    than its share keeps all of it and leaves the rest to the longer ones."""
    allowances = [0] * len(sizes)
    left = budget
    pending = sorted(range(len(sizes)), key=lambda i: sizes[i])
    while pending:
        share = max(_MIN_MESSAGE_KEPT, left // len(pending))
        i = pending.pop(0)
        allowances[i] = min(sizes[i], share)
        left -= allowances[i]
    return allowances


def _cut_block(block: str, allowance: int) -> str:
    if len(block) <= allowance:
        return block
    marker = _block_marker(len(block))
    keep = max(0, allowance - len(marker) - 1)
    head = block[:keep]
    return head + ("" if head.endswith("\n") or not head else "\n") + _block_marker(
        len(block) - keep
    )


def _block_marker(cut: int) -> str:
    return f"[... {cut} more characters of this message cut ...]\n"


def _keep_tail(text: str, limit: int) -> str:
    marker = "[... the first {} of " + str(len(text)) + " characters cut ...]\n"
    # Sized for the widest count, so the marker and the tail always fit together.
    tail = text[len(text) - (limit - len(marker.format(len(text)))) :]
    newline = tail.find("\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]  # start on a whole line
    return marker.format(len(text) - len(tail)) + tail
