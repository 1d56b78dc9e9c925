"""Claim tokens never repeat: within a process, across processes, after a restart and
in a forked child."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from conveyor.shell.ports import is_prefetched, prefetch_token
from conveyor.shell.tokens import fresh_token


def _prefix(token: str) -> str:
    return token.rsplit("-", 1)[0]


def test_tokens_from_many_threads_never_repeat() -> None:
    made: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(fresh_token() for _ in range(5000))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [token for out in made for token in out]
    assert len(set(every)) == len(every)


def test_a_token_fits_the_claim_columns_and_reads_as_started() -> None:
    token = fresh_token()
    assert len(token) <= 40 and token.isascii()
    assert not is_prefetched(token)
    assert is_prefetched(prefetch_token(token))


def test_each_process_start_draws_its_own_prefix() -> None:
    code = "from conveyor.shell.tokens import fresh_token; print(fresh_token())"
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    first, second = (_prefix(run.stdout.strip()) for run in runs)
    assert first != second
    assert _prefix(fresh_token()) not in (first, second)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_counts_from_its_parents_prefix() -> None:
    fresh_token()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its first token and leave at once
        os.write(write, fresh_token().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert _prefix(child) != _prefix(fresh_token())
