"""The dataflow-trace digest: equal for the same op graph, different for another one, with the first departure named."""

from __future__ import annotations

import json

import numba
import pytest
import torch

from kernels import cpu_reduce
from p2paudit.lab import LabRun, first_departure
from tests.lab import models


def one_step(**kwargs: object) -> LabRun:
    model, opt = models.make(**kwargs)
    run = LabRun(model, opt, backend="cpu")
    with run.step(0):
        models.train_step(model, opt, models.batches(1)[0])
    return run


def test_the_same_graph_gives_the_same_trace():
    a, b = one_step(), one_step()
    assert a.records[0].trace == b.records[0].trace
    assert first_departure(list(a.records[0].ops), list(b.records[0].ops)) is None


def test_an_extra_op_changes_the_trace_and_is_named_but_not_the_state():
    plain, extra = one_step(), one_step(extra_op=True)
    # h * 1.0 changes no value: the states are equal, the traces are not (a finding of its own).
    assert plain.records[0].state.digest == extra.records[0].state.digest
    assert plain.records[0].trace != extra.records[0].trace
    ops_a, ops_b = list(plain.records[0].ops), list(extra.records[0].ops)
    first = next(i for i, (x, y) in enumerate(zip(ops_a, ops_b)) if x != y)
    assert json.loads(ops_b[first])[0] == "aten.mul.Tensor"
    message = first_departure(ops_a, ops_b)
    assert message is not None and message.startswith(f"the op sequence differs at op {first}: ")
    assert "aten.mul.Tensor" in message


def test_another_wiring_of_the_same_ops_changes_the_trace():
    # x + y and y + x: the same op, shapes and values; only which earlier output feeds which input differs.
    def trace_of(swap: bool) -> bytes:
        model, opt = models.make()
        run = LabRun(model, opt, backend="cpu")
        x, y = torch.ones(3), torch.full((3,), 2.0)
        with run.step(0):
            a, b = x * 1.0, y * 1.0
            _ = (b + a) if swap else (a + b)
        return run.records[0].trace

    assert trace_of(False) == trace_of(False)
    assert trace_of(False) != trace_of(True)


def test_parameters_are_named_in_the_trace():
    run = one_step()
    inputs = [i for r in run.records[0].ops for i in json.loads(r)[1]]
    named = {i[1] for i in inputs if i[0] == "named"}
    assert "params/head.weight" in named and "opt/m/head.weight" not in named  # no moments before step 1
    external = [i for i in inputs if i[0] == "ext"]
    assert {tuple(i[2]) for i in external} == {(2, 9)}  # only the batch comes from outside


def gpt2_step_trace() -> list[bytes]:
    model, opt = models.make_gpt2()
    run = LabRun(model, opt, backend="cpu")
    with run.step(0):
        models.train_step(model, opt, models.batches(1)[0])
    return list(run.records[0].ops)


@pytest.mark.slow
def test_a_kernel_compiled_inside_a_step_leaves_the_op_graph_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    # A verifier's first step compiles the cpu kernels (numba's cache is cold). The compiler leaves reference
    # cycles holding the table entry's frame, and so its outputs, until Python's GC runs; autograd steals or
    # clones a gradient by its reference count (aten.detach vs aten.new_empty_strided + copy_), so before the
    # mode pinned when garbage is collected, the tied GPT-2's trace departed at op 98 on a cold cache.
    warm = gpt2_step_trace()
    for name in ("_sum_cols_registers", "_sum_cols_buffered"):  # the real kernels, compiled afresh (no cache)
        monkeypatch.setattr(cpu_reduce, name, numba.njit(parallel=True)(getattr(cpu_reduce, name).py_func))
    cold = gpt2_step_trace()
    assert first_departure(cold, warm) is None


def test_records_are_written_as_json_dumps_writes_them():
    from p2paudit.lab.trace import _json

    values = [None, True, False, 0, -7, 2**70, "aten.add.Tensor", 'a "q" \\ \n é ☃', [], [[1, [2, "x"]], None]]
    for v in values + [values]:
        assert _json(v) == json.dumps(v, separators=(",", ":"), ensure_ascii=True)


def test_every_input_tensor_is_checked_before_the_op_even_one_nested_deeper_than_a_list():
    """Tracer.inputs hands each tensor argument (and any list, tuple or dict that holds one deeper down, which
    no aten op takes) to the check before labelling it; the mode's check refuses a float64 one by name."""
    import kernels
    from p2paudit.lab.mode import CanonicalMode
    from p2paudit.lab.refusal import LabOpRefused
    from p2paudit.lab.trace import Tracer

    seen: list[object] = []
    t = torch.ones(2)
    nested = [[t]]
    inputs, constants = Tracer().inputs((t, nested, 3), {"k": {"x": t}}, seen.append)
    assert seen[0] is t and seen[1] is nested and seen[2] == {"x": t} and len(seen) == 3
    assert len(inputs) == 1 and len(constants) == 4  # the nested ones recorded as constants (their types)
    mode = CanonicalMode(kernels.get_backend("cpu", 2))
    mode._op = "aten.fake.default"
    mode._check_input(nested)  # float32 inside: accepted
    with pytest.raises(LabOpRefused, match=r"aten\.fake\.default .*a float64 tensor as input"):
        mode._check_input([[torch.ones(2, dtype=torch.float64)]])
    with pytest.raises(LabOpRefused, match=r"a float64 tensor as input"):
        mode._check_input({"x": torch.ones(2, dtype=torch.float64)})
