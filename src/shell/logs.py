"""What the worker says about failures, and a JSON log format for collectors.

Every failed attempt is one WARNING on `conveyor.worker` carrying the traceback
of the exception the handler raised; every dead letter a worker or its lease
keeper writes is one ERROR with its reason. Both name the job by id, type and
attempt and never show its args, which may hold secrets: the fields logged are
listed here, and nothing else of the job is read.

`JsonFormatter` writes one JSON object per line (`conveyor --log-format json`),
with the job's fields as keys of their own where a record has them.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from ..core import DeadLetter, Decision, ErrorInfo, Job, Retry, cap_traceback
from .terminal import escape

#: Record attributes a conveyor log line may carry (`extra=`); the JSON format
#: gives each its own key. Job args are deliberately not among them.
JOB_FIELDS = ("job_id", "job_type", "queue", "attempt", "error_type")


def job_fields(job: Job, error: ErrorInfo | None = None) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "job_id": str(job.id),
        "job_type": job.job_type,
        "queue": job.queue,
        "attempt": job.attempt,
    }
    if error is not None:
        fields["error_type"] = error.type
    return fields


def _reason(error: ErrorInfo) -> str:
    # On one line: a message is the handler's (job data), and a line break in it would
    # forge a log line of its own for whoever reads the log line by line.
    return escape(f"{error.type}: {error.message or error.type}")


def log_failed_attempt(
    log: logging.Logger,
    job: Job,
    error: ErrorInfo,
    exc: BaseException | None,
    decision: Decision,
    *,
    written: bool,
) -> None:
    """One WARNING for one failed attempt, with the handler's traceback when there is
    an exception behind it. `job` is the record the decision writes."""
    if not written:
        then = "its outcome was not written; the lease will bring the job back"
    elif isinstance(decision, Retry):
        then = f"retrying at {decision.run_at.isoformat()}"
    elif isinstance(decision, DeadLetter):
        then = "giving up"
    else:
        then = type(decision).__name__.lower()
    log.warning(
        "job %s (%s) attempt %d failed: %s; %s",
        job.id,
        job.job_type,
        job.attempt,
        _reason(error),
        then,
        exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None,
        extra=job_fields(job, error),
    )


def log_dead_letter(log: logging.Logger, job: Job, error: ErrorInfo) -> None:
    """One ERROR for a dead letter just written."""
    log.error(
        "job %s (%s) dead-lettered after attempt %d: %s",
        job.id,
        job.job_type,
        job.attempt,
        _reason(error),
        extra=job_fields(job, error),
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, and
    `exc_info` as one string when the record has a traceback; with `process_index`
    (a copy under `conveyor worker --processes`), `process` too."""

    def __init__(self, process_index: str | None = None) -> None:
        super().__init__()
        self._process = process_index

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self._process is not None:
            entry["process"] = self._process
        for name in JOB_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        # A filter (the CLI's redaction) may have rendered and masked it already.
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class WrittenOnTheWay(logging.Filter):
    """For the CLI's own (root) handler of a text log: drops a record that a handler
    of a logger on its way up already wrote to this process's stderr, where the CLI
    writes too. A project that configures its own logging (Django's console handler
    on `django`, a handler module's) would otherwise see those lines twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        terminals = {sys.stderr, sys.__stderr__}
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None and logger is not logging.root:
            for handler in logger.handlers:
                if (
                    isinstance(handler, logging.StreamHandler)
                    and handler.stream in terminals
                    and record.levelno >= handler.level
                    and handler.filter(record)
                ):
                    return False
            logger = logger.parent if logger.propagate else None
        return True


#: The most characters of a traceback one line of the CLI's log carries: every frame
#: stays, and the exception messages are cut to fit (a handler's error may hold a
#: megabyte of text).
LOG_TRACEBACK_CHARS = 16_000


class CappedTraceback(logging.Filter):
    """For the CLI's handlers: renders a record's traceback and cuts its exception
    messages to `LOG_TRACEBACK_CHARS` (`cap_traceback`), keeping every frame."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = cap_traceback(record.exc_text, LOG_TRACEBACK_CHARS)
        return True

