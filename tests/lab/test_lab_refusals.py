"""What the strict mode refuses, each by name in one line: ops outside the table, dtypes, dropout, optimizers."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import kernels
from kernels.cpu_float_modes import nonstandard_modes
from p2paudit.errors import EXIT_USAGE
from p2paudit.lab import CanonicalMode, LabOpRefused, LabRun
from p2paudit.lab import mode as lab_mode
from tests.float_modes import flushing_denormals, rounding
from tests.lab import models


def mode() -> CanonicalMode:
    return CanonicalMode(kernels.get_backend("reference"))


def test_an_op_outside_the_table_is_refused_by_name():
    x = torch.ones(3)
    with pytest.raises(LabOpRefused) as e, mode():
        torch.erf(x)
    assert str(e.value).startswith("aten.erf.default is not in op table 1 (refused: erf has no canonical definition")
    assert "\n" not in str(e.value)
    assert e.value.exit_code == EXIT_USAGE


def test_an_unknown_op_gets_the_generic_reason():
    with (
        pytest.raises(LabOpRefused, match=r"^aten\.atan\.default is not in op table 1 \(refused: no canonical"),
        mode(),
    ):
        torch.atan(torch.ones(2))


def test_a_float64_tensor_is_refused():
    x = torch.ones(3, dtype=torch.float64)
    with (
        pytest.raises(LabOpRefused, match=r"aten\.add\.Tensor refused by op table 1: a float64 tensor as input"),
        mode(),
    ):
        x + x


def test_a_float16_conversion_is_refused():
    with pytest.raises(LabOpRefused, match="a conversion from torch.float32 to torch.float16"), mode():
        torch.ones(2).half()


def test_dropout_is_refused():
    with (
        pytest.raises(
            LabOpRefused,
            match=r"aten\.(native_dropout\.default|bernoulli_\.float) is not in op table 1 \(refused: random numbers \(dropout",
        ),
        mode(),
    ):
        F.dropout(torch.ones(4), 0.1, training=True)


def test_a_refused_op_in_backward_is_named_too():
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(LabOpRefused, match=r"^aten\.sgn\.default is not in op table 1"), mode():
        w.abs().sum().backward()  # abs is exact (torch runs it); its backward's sgn is not in the table


def test_a_table_entry_refuses_arguments_it_does_not_cover():
    x = torch.ones(4)
    with pytest.raises(LabOpRefused, match=r"aten\.pow\.Tensor_Scalar refused by op table 1: exponent 2\.5"), mode():
        x**2.5


def test_the_default_adamw_path_is_refused_at_the_start():
    model, _ = models.make()
    for kwargs, what in (({}, "without fused=True"), ({"fused": True, "amsgrad": True}, "amsgrad")):
        opt = torch.optim.AdamW(model.parameters(), **kwargs)
        with pytest.raises(LabOpRefused, match=what):
            LabRun(model, opt)
    with pytest.raises(LabOpRefused, match="optimizer SGD is not in op table 1"):
        LabRun(model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_the_default_adamw_ops_are_refused_inside_the_mode_too():
    model, _ = models.make()
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    tokens = models.batches(1)[0]
    with pytest.raises(LabOpRefused, match=r"is not in op table 1 \(refused: AdamW's single-tensor"), mode():
        models.train_step(model, opt, tokens)


@pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)  # torch.compile's own import
def test_a_compiled_model_is_refused():
    model, opt = models.make()
    compiled = torch.compile(model)
    with pytest.raises(LabOpRefused, match="torch.compile"):
        LabRun(compiled, opt)


def test_steps_run_in_order():
    model, opt = models.make()
    run = LabRun(model, opt, backend="reference")
    with pytest.raises(LabOpRefused, match="step 1 out of order: the next step of this run is 0"), run.step(1):
        pass


@pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)  # torch.compile's own import
def test_a_compiled_function_called_inside_the_mode_runs_through_the_table():
    # Dynamo does not compile under an active TorchDispatchMode (torch 2.13): the function runs eagerly,
    # and every op it calls reaches the table, none a compiled kernel. Nor does Dynamo trace the mode's own
    # dispatch (p2paudit.lab.mode._unwrap_dispatch marks it skipped, recursively, in place of torch's
    # per-call wrapper): it would warn of the builtins there it cannot trace, gc.collect first.
    import torch._dynamo.utils

    assert lab_mode.DISPATCH_UNWRAPPED  # this torch has the frame-strategy API
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    f = torch.compile(lambda x: (x * 2).sin().sum())
    x = torch.ones(8)
    m = mode()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with m:
            f(x)
    assert m.calls == {"aten.mul.Tensor": 1, "aten.sin.default": 1, "aten.sum.default": 1}
    assert not [w for w in seen if "Dynamo" in str(w.message)], [str(w.message)[:100] for w in seen]
    assert not any(torch._dynamo.utils.counters["frames"].values())  # no frame traced, none compiled


def test_an_unknown_backend_is_refused_naming_the_three():
    model, opt = models.make()
    with pytest.raises(LabOpRefused, match="backend 'xpu': the lab mode runs on reference, cpu, triton"):
        LabRun(model, opt, backend="xpu")


def test_a_step_under_flush_to_zero_is_refused_before_any_op():
    """torch.set_flush_denormal(True) turns MXCSR's flush-to-zero and denormals-are-zero on for its thread:
    the kernels there would flush subnormals (docs/arithmetic.md 1 keeps them), so nothing is computed."""
    with flushing_denormals():
        with (
            pytest.raises(
                LabOpRefused, match=r"^a step with flush-to-zero and denormals-are-zero on in this thread is refused"
            ),
            mode(),
        ):
            torch.ones(3) * 2.0
    assert nonstandard_modes() == []


def test_flush_to_zero_turned_on_inside_a_step_is_refused_at_the_next_op():
    x = torch.full((4,), 1e-39)  # subnormal: flushed to +0.0 under the mode's kernels with it on
    with pytest.raises(LabOpRefused, match=r"^aten\.mul\.Tensor refused by op table 1: flush-to-zero"), mode():
        y = x + x  # computed with subnormals kept
        with flushing_denormals():
            y * 0.5
    assert nonstandard_modes() == []


def test_the_mode_reads_the_thread_s_own_float_modes():
    assert nonstandard_modes() in ([], None)
    with flushing_denormals():
        assert nonstandard_modes() == ["flush-to-zero", "denormals-are-zero"]


def test_another_rounding_turned_on_inside_a_step_is_refused_at_the_next_op():
    x = torch.full((4,), 1.0 / 3.0)
    with pytest.raises(LabOpRefused, match=r"^aten\.mul\.Tensor refused by op table 1: rounding toward zero"), mode():
        y = x + x
        with rounding(0xC00):
            y * 3.0
    assert nonstandard_modes() == []
