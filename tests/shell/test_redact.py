"""URL passwords are masked wherever the shell prints, logs or raises them."""

from __future__ import annotations

import logging
import traceback

import pytest
from conveyor.core import ValidationError
from conveyor.shell.redact import (
    BackendError,
    RedactingFilter,
    guarded,
    mask_url,
    password_of,
    redact,
    url_secrets,
)

URLS = {
    "postgresql+psycopg://app:pa#ss@db.internal:5432/jobs": (
        "pa#ss",
        "postgresql+psycopg://app:***@db.internal:5432/jobs",
    ),
    "redis://:p/w@d@127.0.0.1:6379/0": ("p/w@d", "redis://:***@127.0.0.1:6379/0"),
    "rediss://default:s%40fe@cache:6380/1": ("s%40fe", "rediss://default:***@cache:6380/1"),
    "sqlite:////var/lib/jobs.db": (None, "sqlite:////var/lib/jobs.db"),
    "redis://cache:6379/0": (None, "redis://cache:6379/0"),
}


@pytest.mark.parametrize("url", URLS)
def test_the_password_is_read_up_to_the_last_at_sign_and_masked(url: str) -> None:
    password, masked = URLS[url]
    assert password_of(url) == password
    assert mask_url(url) == masked


def test_secrets_hold_the_password_as_written_and_decoded() -> None:
    assert url_secrets("redis://:s%40fe@h/0", None) == {"s%40fe", "s@fe"}


def test_redact_masks_urls_in_text_and_every_known_secret() -> None:
    text = "cannot reach postgresql://u:x#y@z@h/db; login 'x#y@z' refused, token s@fe"
    out = redact(text, {"s@fe"})
    assert out == "cannot reach postgresql://u:***@h/db; login 'x#y@z' refused, token ***"
    assert redact(text, {"x#y@z", "s@fe"}).count("x#y") == 0


def test_the_log_filter_masks_messages_arguments_and_tracebacks() -> None:
    record = logging.LogRecord(
        "conveyor",
        logging.ERROR,
        __file__,
        1,
        "connect to %s failed",
        ("redis://:hunter2@h",),
        None,
    )
    try:
        raise ConnectionError("AUTH hunter2 refused")
    except ConnectionError:
        import sys

        record.exc_info = sys.exc_info()
    assert RedactingFilter({"hunter2"}).filter(record)
    formatted = logging.Formatter().format(record)
    assert "hunter2" not in formatted and "redis://:***@h" in formatted


def test_the_log_filter_leaves_a_record_with_mismatched_arguments_to_the_handler() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%d", ("not a number",), None)
    assert RedactingFilter().filter(record)


def test_a_failure_while_building_is_reraised_without_password_or_chained_original() -> None:
    def connect() -> None:
        raise OSError("login as app:s3cret failed")

    with pytest.raises(BackendError) as info:
        guarded("url", "postgresql://app:s3cret@h/db", connect)
    assert str(info.value).startswith("url: could not use postgresql://app:***@h/db: OSError")
    assert info.value.__context__ is None and info.value.__cause__ is None
    assert "s3cret" not in "".join(traceback.format_exception_only(info.value))


def test_a_password_a_parser_splits_gets_no_driver_text_only_the_fix() -> None:
    def connect() -> None:
        raise ValueError("Port could not be cast to integer value as 's3'")

    with pytest.raises(ValidationError) as info:
        guarded("redis.url", "redis://:s3#cret@h:6379/0", connect)
    assert info.value.fields == ("redis.url",)
    assert "'s3'" not in str(info.value) and "%23" in str(info.value)


def test_a_short_password_is_masked_only_where_it_stands_whole() -> None:
    """With the password `p`, the words that hold a `p` are left as they are."""
    url = "postgresql+psycopg://u:p@127.0.0.1:1/none"
    text = (
        f"PostgreSQL at {url}: (psycopg.OperationalError) connection to port 1 failed; "
        "see https://sqlalche.me; login p refused; as 'p'"
    )
    out = redact(text, url_secrets(url))
    assert out == (
        "PostgreSQL at postgresql+psycopg://u:***@127.0.0.1:1/none: (psycopg.OperationalError) "
        "connection to port 1 failed; see https://sqlalche.me; login *** refused; as '***'"
    )


def test_a_secret_with_punctuation_at_its_ends_is_masked_next_to_letters() -> None:
    assert redact("token=#s3@x#end", {"#s3@x#"}) == "token=***end"
    assert redact("AUTH hunter2 refused; hunter22 is another", {"hunter2"}) == (
        "AUTH *** refused; hunter22 is another"
    )


def test_an_unreachable_server_with_a_one_letter_password_reads_plainly() -> None:
    import conveyor
    from conveyor.shell.outage import ServerUnreachable

    url = "postgresql+psycopg://u:p@127.0.0.1:1/none"
    with pytest.raises(ServerUnreachable) as info:
        conveyor.build({"provider": "db", "url": url}, startup_timeout_s=0)
    message = str(info.value)
    assert message.startswith("PostgreSQL at postgresql+psycopg://u:***@127.0.0.1:1/none ")
    assert "psycopg" in message.split(" is unreachable ", 1)[1]
    assert ":p@" not in message


def test_a_driver_error_is_told_without_sqlalchemys_link_to_its_docs() -> None:
    import sqlalchemy as sa
    from conveyor.shell.redact import describe_failure

    url = "postgresql+psycopg://app:hunter2@db.internal:5432/jobs"
    raw = sa.exc.OperationalError("SELECT 1", {}, Exception("connection failed: refused"))
    assert "Background on this error" in str(raw)
    told = str(describe_failure("url", url, raw))
    assert "connection failed: refused" in told and "sqlalche.me" not in told, told
    assert "hunter2" not in told


def test_an_unreachable_tls_url_says_a_server_without_tls_never_answers_it() -> None:
    # A rediss:// URL to a plain port timed out and said only "start the server",
    # which was running.
    from conveyor.shell.outage import ServerUnreachable

    detail = "TimeoutError: Timeout connecting to server"
    tls = str(ServerUnreachable("Redis", "rediss://cache:6379/0", "redis.url", detail, 1.0))
    plain = str(ServerUnreachable("Redis", "redis://cache:6379/0", "redis.url", detail, 1.0))
    assert "a server without TLS never answers it" in tls, tls
    assert "TLS" not in plain, plain
