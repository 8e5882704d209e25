"""The first departing op of two traces is named in one line, whatever the other side's records hold."""

from __future__ import annotations

import pytest

from p2paudit.lab.trace import first_departure

GOOD = b'["aten.mm.default",[["op",0,0],["param",1]],[[[4,8],"torch.float32"]],[]]'


def test_the_first_differing_op_is_named_with_both_sides():
    other = b'["aten.addmm.default",[["op",0,0]],[[[4,8],"torch.float32"]],[]]'
    line = first_departure([GOOD, GOOD], [GOOD, other])
    assert line == (
        "the op sequence differs at op 1: aten.mm.default of 2 inputs -> [(4, 8)] here, "
        "aten.addmm.default of 1 inputs -> [(4, 8)] there"
    )


@pytest.mark.parametrize(
    "record",
    [b"not json", b"[1, 2]", b'{"a": 1}', b'["x", 1, [[1]], 0]', b'["x", [], [7], []]', b"[" * 100_000],
)
def test_a_record_that_is_not_a_trace_entry_is_described_not_raised(record):
    line = first_departure([GOOD], [record])
    assert line == (
        "the op sequence differs at op 0: aten.mm.default of 2 inputs -> [(4, 8)] here, "
        f"a record that is not a trace entry ({len(record)} bytes) there"
    )


def test_equal_traces_have_no_departure_and_a_longer_one_names_its_first_extra_op():
    assert first_departure([GOOD], [GOOD]) is None
    assert first_departure([GOOD], [GOOD, b"junk"]) == (
        "the op sequence differs at op 1: 1 ops here, 2 there (first extra: a record that is not a trace entry (4 bytes))"
    )
