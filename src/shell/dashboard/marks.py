"""Characters in stored text that a page must not render as they are.

Job data is written by whoever enqueues, and error messages by whatever failed.
Escaping keeps markup from running, but some characters do harm as text: a
right-to-left override (U+202E) or an isolate (U+2066..U+2069) reverses what
follows, so `fdp.exe` reads as `exe.pdf`; zero-width spaces and joiners, a BOM or
a Hangul filler make two different names look the same; control characters
(an escape sequence) have no business on a page at all. Each such character is
shown as a visible mark, `[U+202E]`, in its place: the text stays readable and
says what it holds.

Marked: control characters other than tab and line feed (Cc), format characters
(Cf: the bidirectional controls, zero-width characters, the BOM, soft hyphen),
line and paragraph separators (Zl, Zp), lone surrogates (Cs) and the few letters
that draw nothing (`_BLANK`). Letters, marks, spaces and emoji are left alone
(an emoji sequence joined by U+200D shows its joiner, the price of catching the
joiner elsewhere).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from markupsafe import Markup

#: Categories whose characters are marked.
_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})

#: Letters and marks that draw nothing: Hangul fillers, Khmer inherent vowels, the
#: combining grapheme joiner.
_BLANK = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0")

#: Left as they are: they lay out text and hide nothing.
_KEPT = frozenset("\t\n")

#: ASCII's marked characters: every control character but tab and line feed.
_ASCII_HIDDEN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def hidden(char: str) -> bool:
    """Whether `char` is marked rather than shown."""
    if char in _KEPT:
        return False
    return char in _BLANK or unicodedata.category(char) in _CATEGORIES


def mark_hidden(text: str) -> str:
    """`text` with each hidden character replaced by `[U+XXXX]`."""
    if text.isascii():
        if _ASCII_HIDDEN.search(text) is None:
            return text
    elif not any(hidden(char) for char in text):
        return text
    return "".join(f"[U+{ord(char):04X}]" if hidden(char) else char for char in text)


def finalize(value: Any) -> Any:
    """Jinja's `finalize` hook: every string a template prints is marked (markup the
    templates build themselves is left as it is)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return mark_hidden(value)
    return value
