"""Tensor comparison in ulps and the first departing operation of two traces."""

import numpy as np

from p2paudit.audit.diagnosis import Divergence, compare_tensor, conclude, first_divergence, ordered_bits


def test_ulps_count_adjacent_floats_across_zero():
    x = np.array([0.0, -0.0, 1.0, np.float32(1.0) + np.finfo(np.float32).eps], dtype=np.float32)
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    assert ordered_bits(x).tolist()[:2] == [0, 0]
    assert ordered_bits(x)[3] - ordered_bits(x)[2] == 1
    assert abs(int(ordered_bits(np.array([tiny], np.float32))[0] - ordered_bits(np.array([-tiny], np.float32))[0])) == 2


def test_compare_tensor_counts_and_measures():
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    b = a.copy()
    b[0, 1] = np.nextafter(b[0, 1], np.float32(9))
    b[2, 3] = np.nextafter(np.nextafter(np.nextafter(b[2, 3], np.float32(-9)), np.float32(-9)), np.float32(-9))
    diff = compare_tensor("w", a, b)
    assert (diff.differing, diff.size, diff.max_ulps) == (2, 12, 3)
    assert "2 of 12 elements differ, max 3 ulp" in diff.line()
    assert compare_tensor("w", a, a).differing == 0


def test_nan_equals_nan_but_not_a_number():
    a = np.array([np.nan, 1.0], dtype=np.float32)
    b = a.copy()
    b.view(np.uint32)[0] = 0xFFC00001  # another NaN
    assert compare_tensor("x", a, b).differing == 0
    c = np.array([2.0, 1.0], dtype=np.float32)
    diff = compare_tensor("x", a, c)
    assert diff.differing == 1 and diff.max_ulps is None


def test_integer_tensors_compare_by_absolute_difference():
    diff = compare_tensor("step", np.array(3, np.int64), np.array(5, np.int64))
    assert (diff.differing, diff.size, diff.max_ulps) == (1, 1, 2)


def test_first_divergence_names_the_op():
    a = [("mb0/fwd/x0", b"1"), ("mb0/fwd/ln1", b"2"), ("loss", b"3")]
    assert first_divergence("cpu", a, "reference", list(a)).index is None
    b = [a[0], ("mb0/fwd/ln1", b"X"), a[2]]
    found = first_divergence("cpu", a, "reference", b)
    assert (found.index, found.op_name) == (1, "mb0/fwd/ln1")
    assert "first depart at operation #1 mb0/fwd/ln1" in found.line()
    shorter = first_divergence("cpu", a, "published trace", a[:2])
    assert shorter.index == 2 and "one trace has 3 ops, the other 2" in shorter.op_name


def test_conclusions():
    agree = Divergence("cpu", "reference", None, None, 10)
    assert "fault is in the claim" in conclude((agree,), ("cpu", "reference"))
    departs = Divergence("cpu", "reference", 4, "mb0/fwd/attn", 5)
    assert "a backend departs" in conclude((departs,), ("cpu", "reference"))
    published = Divergence("cpu", "published trace", 7, "update/wte/p", 8)
    assert "published trace departs at operation update/wte/p" in conclude((agree, published), ("cpu", "reference"))


def test_a_diagnosis_without_claimed_tensors_says_why_it_has_no_counts():
    from p2paudit.audit.diagnosis import Diagnosis

    agree = Divergence("cpu", "reference", None, None, 10)
    lines = Diagnosis(4, ("params/wte",), (), (agree,), "the fault is in the claim").lines()
    assert lines[0] == "step 4: 1 tensor(s) differ: params/wte"
    assert "state 5 has no published checkpoint" in lines[1]
    assert lines[-1] == "  conclusion: the fault is in the claim"


def test_long_tensor_lists_are_shortened_in_lines_only():
    from p2paudit.audit.diagnosis import MAX_NAMES_SHOWN, Diagnosis

    names = tuple(f"params/t{i:02d}" for i in range(MAX_NAMES_SHOWN + 3))
    diagnosis = Diagnosis(0, names, (), (Divergence("cpu", "reference", None, None, 1),), "x")
    assert diagnosis.lines()[0].endswith("params/t07 and 3 more")
    assert diagnosis.to_dict()["tensors"] == list(names)
