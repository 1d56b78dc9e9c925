"""A dependent's `Inputs`, as a handler reads them: a read-only mapping from each input's
name (its id where it has none) to its result, in the order the job waited for them;
each input found by name, id, id string or handle. No server: the mapping alone."""

from __future__ import annotations

from uuid import uuid4

import pytest
from conveyor.shell.inputs import Inputs
from conveyor.shell.runtime.workflows import Handle

A, B, C = uuid4(), uuid4(), uuid4()
INPUTS = Inputs({"fetch": 1, "parse": None}, {A: 1, B: None, C: 3}, names={A: "fetch", B: "parse"})


def test_inputs_iterate_by_name_in_the_order_waited_for_and_by_id_where_unnamed() -> None:
    # It had no __iter__: `list(inputs)` and `in` asked for inputs[0], a KeyError: 0.
    assert list(INPUTS) == ["fetch", "parse", C]
    assert list(INPUTS.values()) == [1, None, 3]
    assert dict(INPUTS.items()) == {"fetch": 1, "parse": None, C: 3}
    assert sum(v for v in INPUTS.values() if v is not None) == 4
    assert len(INPUTS) == 3


def test_an_input_is_found_by_name_id_id_string_or_handle() -> None:
    assert "fetch" in INPUTS and A in INPUTS and str(C) in INPUTS
    assert Handle(job_id=B, name="parse", workflow_id=uuid4()) in INPUTS
    assert INPUTS[str(A)] == INPUTS[A] == INPUTS["fetch"] == 1
    assert "mail" not in INPUTS and uuid4() not in INPUTS and 0 not in INPUTS
    assert INPUTS.get("mail", "none") == "none"


def test_an_unknown_name_is_a_key_error_listing_the_names() -> None:
    # It was a ValueError from reading the name as an id.
    with pytest.raises(KeyError) as missing:
        INPUTS["mail"]
    assert "no input named 'mail'; the inputs are 'fetch', 'parse'" in str(missing.value)
