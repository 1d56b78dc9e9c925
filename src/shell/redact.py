"""Keeping URL passwords out of messages, logs and reprs.

A password holding an unencoded `#`, `/`, `?` or `@` is split by URL parsers
at that character, and the drivers then quote a piece of it back as a host or a
port ("Port could not be cast to integer value as 'se'"). The piece is not the
password, so replacing the password in the text is not enough: errors raised
while building from such a URL are rewritten without the driver's message.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from typing import TypeVar
from urllib.parse import unquote

from ..core import FieldError, ValidationError

T = TypeVar("T")

MASK = "***"
#: Characters a URL parser ends the password at; RFC 3986 wants them percent-encoded.
SPLITTERS = {"#": "%23", "/": "%2F", "?": "%3F", "@": "%40"}

# scheme://user:password@ where the password runs to the last '@' of the token,
# so an unencoded '@' inside it is masked too.
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)(?P<password>\S*)@")


class BackendError(RuntimeError):
    """The queue or store could not be built from its URL (unreachable server,
    refused login...). The message names the config key and never holds the password."""


def _split(url: str) -> tuple[str, str, str] | None:
    """(`scheme://`, userinfo, `@rest`), taking the last '@' as the end of the userinfo."""
    scheme_end = url.find("://")
    at = url.rfind("@")
    if scheme_end < 0 or at < scheme_end:
        return None
    head = url[: scheme_end + 3]
    return head, url[len(head) : at], url[at:]


def password_of(url: str) -> str | None:
    """The password as the URL's author meant it (up to the last '@'), or None."""
    parts = _split(url)
    if parts is None or ":" not in parts[1]:
        return None
    return parts[1].split(":", 1)[1] or None


def mask_url(url: str | None) -> str | None:
    """`url` with its password replaced by `***` (user, host, port and path kept)."""
    if url is None:
        return None
    parts = _split(url)
    if parts is None or ":" not in parts[1]:
        return url
    head, userinfo, rest = parts
    return f"{head}{userinfo.split(':', 1)[0]}:{MASK}{rest}"


def url_secrets(*urls: str | None) -> frozenset[str]:
    """The passwords in `urls`, as written and percent-decoded."""
    found: set[str] = set()
    for url in urls:
        password = password_of(url) if url else None
        if password:
            found.update({password, unquote(password)})
    return frozenset(s for s in found if s)


def _whole(secret: str) -> re.Pattern[str]:
    """`secret` where it stands whole: not run on into the letters or digits around it
    (a one-letter password is not masked inside every word that holds that letter)."""
    head = r"(?<!\w)" if re.match(r"\w", secret[0]) else ""
    tail = r"(?!\w)" if re.match(r"\w", secret[-1]) else ""
    return re.compile(head + re.escape(secret) + tail)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with the password field of every URL in it masked, and each of `secrets`
    replaced by `***` wherever it stands whole (not inside a longer word)."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}@", text)
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = _whole(secret).sub(MASK, text)
    return text


def one_line(text: str) -> str:
    """Collapse whitespace runs (a driver's multi-line message) into single spaces."""
    return " ".join(text.split())


def unencoded(url: str) -> list[str]:
    """The URL-splitting characters the password of `url` holds unencoded."""
    password = password_of(url) or ""
    return [c for c in SPLITTERS if c in password]


def describe_failure(field: str, url: str, exc: BaseException) -> Exception:
    """The error to raise instead of `exc`, which came from building on `url`."""
    where = mask_url(url)
    splitters = unencoded(url)
    if splitters:
        # The driver's text may quote a piece of the split password, so none of it is kept.
        codes = ", ".join(f"{c!r} as {SPLITTERS[c]}" for c in splitters)
        return ValidationError.of(
            field,
            f"{where} could not be used ({type(exc).__name__}; its message is withheld as it "
            f"may quote part of the password): percent-encode the password's {codes}",
        )
    secrets = url_secrets(url)
    if isinstance(exc, ValidationError):
        return ValidationError(
            [FieldError(e.field, one_line(redact(e.reason, secrets))) for e in exc.errors]
        )
    message = one_line(redact(_SQLALCHEMY_LINK.sub("", str(exc)), secrets))
    return BackendError(f"{field}: could not use {where}: {type(exc).__name__}: {message}")


#: SQLAlchemy ends its errors with a link to its docs: noise in a one-line error.
_SQLALCHEMY_LINK = re.compile(r"\s*\(Background on this error at: [^)]*\)")


def guarded(field: str, url: str | None, make: Callable[[], T]) -> T:
    """`make()`, which builds on `url`; a failure is re-raised without the password.

    The replacement is raised outside the `except` block so that it carries no
    `__context__`: a traceback or an error reporter walking the chain would print
    the original message.
    """
    if url is None:
        return make()
    try:
        return make()
    except Exception as exc:
        error = describe_failure(field, url, exc)
    raise error


class RedactingFilter(logging.Filter):
    """A handler filter that masks URL passwords and known secrets in each record,
    its message, arguments and formatted traceback alike."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets: set[str] = set(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            # Arguments that do not fit the format: the handler reports that itself.
            return True
        record.msg = redact(message, self.secrets)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        return True
