"""Every entry of op table 1 against float64, within a stated bound in float32 ulps (issue 22, item 4).

Each case calls one aten overload directly (so it is that entry that runs) under CanonicalMode on the
cpu backend, and the same overload on float64 copies of the inputs outside the mode (stock torch in
float64: exact or within 1e-15 of exact here, far below a float32 ulp). The error is measured in
units of the float32 spacing at max(|float64 value|, scale): scale 0 for the elementwise entries (a
true ulp error: 0.5 for one correctly rounded operation), and the inputs' magnitude for sums and
products, whose result can cancel to far below their terms. The bounds: 0.5 for one correctly rounded
operation (IEEE's), 0 for the exact entries, tests/lab/test_lab_math.py's for the lab functions
(rsqrt 1.5, sigmoid 2.5, pow with base 10000 11), and for the composites their measured worst case
here rounded up (measured: exp 0.66, log 0.66, x^3 0.78, _foreach_norm 0.63, log_softmax's backward
0.81, tanh's backward 0.51 and sigmoid's 0.14 at scale 1). The last test checks that these cases and
tests/lab/test_lab_ops.py's (rtol and atol 2e-6 against float64 there) reach every TABLE entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

import kernels
from p2paudit.lab import CanonicalMode
from p2paudit.lab.table import TABLE
from tests.lab.test_lab_ops import BACKWARDS, CASES

aten = torch.ops.aten
G = torch.Generator().manual_seed(11)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=G)


def positive(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=G) * 4 + 0.25


@dataclass(frozen=True)
class Case:
    """fn(*args) on float32 under the mode vs on float64 copies; the outputs (or, for in-place ops, the
    first argument) compared within `ulps` of max(|float64|, scale)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    ulps: float
    scale: float = 0.0
    inplace: bool = False


def _cases() -> dict[str, Case]:
    x, y, p = randn(4, 6), randn(4, 6), positive(4, 6)
    logits = randn(6, 5)
    logp = torch.log_softmax(logits.double(), -1).float()
    target = torch.tensor([0, 4, 2, 2, 1, 3])
    idx = torch.tensor([[1, 3, 1], [0, 3, 3]])
    table = randn(5, 6)
    return {
        "aten.add.Tensor": Case(aten.add.Tensor, (x, y), 0.5),
        "aten.add.Tensor alpha": Case(lambda a, b: aten.add.Tensor(a, b, alpha=2), (x, y), 1.0, 1.0),
        "aten.add.Scalar": Case(aten.add.Scalar, (x, 0.375), 0.5),
        "aten.add_.Tensor": Case(aten.add_.Tensor, (x, y), 0.5, inplace=True),
        "aten.add_.Scalar": Case(aten.add_.Scalar, (x, 0.375), 0.5, inplace=True),
        "aten.sub.Tensor": Case(aten.sub.Tensor, (x, y), 0.5),
        "aten.sub.Scalar": Case(aten.sub.Scalar, (x, 0.375), 0.5),
        "aten.sub_.Tensor": Case(aten.sub_.Tensor, (x, y), 0.5, inplace=True),
        "aten.rsub.Tensor": Case(aten.rsub.Tensor, (x, y), 0.5),
        "aten.rsub.Scalar": Case(aten.rsub.Scalar, (x, 0.375), 0.5),
        "aten.mul.Tensor": Case(aten.mul.Tensor, (x, y), 0.5),
        "aten.mul.Scalar": Case(aten.mul.Scalar, (x, 0.375), 0.5),
        "aten.mul_.Tensor": Case(aten.mul_.Tensor, (x, y), 0.5, inplace=True),
        "aten.mul_.Scalar": Case(aten.mul_.Scalar, (x, 0.375), 0.5, inplace=True),
        "aten.div.Tensor": Case(aten.div.Tensor, (x, p), 0.5),
        "aten.div.Scalar": Case(aten.div.Scalar, (x, 3.0), 0.5),
        "aten.div.Tensor_mode": Case(lambda a, b: aten.div.Tensor_mode(a, b, rounding_mode=None), (x, p), 0.5),
        "aten.div_.Tensor": Case(aten.div_.Tensor, (x, p), 0.5, inplace=True),
        "aten.div_.Scalar": Case(aten.div_.Scalar, (x, 3.0), 0.5, inplace=True),
        "aten.neg.default": Case(aten.neg.default, (x,), 0.0),
        "aten.maximum.default": Case(aten.maximum.default, (x, y), 0.0),
        "aten.minimum.default": Case(aten.minimum.default, (x, y), 0.0),
        "aten.clamp.default": Case(lambda a: aten.clamp.default(a, -0.5, 0.75), (x,), 0.0),
        "aten.clamp_min.default": Case(lambda a: aten.clamp_min.default(a, -0.5), (x,), 0.0),
        "aten.clamp_max.default": Case(lambda a: aten.clamp_max.default(a, 0.75), (x,), 0.0),
        "aten.sqrt.default": Case(aten.sqrt.default, (p,), 0.5),
        "aten.reciprocal.default": Case(aten.reciprocal.default, (x,), 0.5),
        "aten.rsqrt.default": Case(aten.rsqrt.default, (p,), 1.5),
        "aten.sigmoid.default": Case(aten.sigmoid.default, (x * 8,), 2.5),
        "aten.sigmoid_backward.default": Case(aten.sigmoid_backward.default, (y, torch.sigmoid(x)), 0.5, 1.0),
        "aten.exp.default": Case(aten.exp.default, (x * 8,), 1.1),
        "aten.log.default": Case(aten.log.default, (p,), 1.5),
        "aten.tanh_backward.default": Case(aten.tanh_backward.default, (y, torch.tanh(x)), 1.0, 1.0),
        "aten.pow.Tensor_Scalar 3": Case(lambda a: aten.pow.Tensor_Scalar(a, 3), (x,), 1.0),
        "aten.pow.Tensor_Scalar -0.5": Case(lambda a: aten.pow.Tensor_Scalar(a, -0.5), (p,), 1.5),
        "aten.pow.Scalar": Case(lambda a: aten.pow.Scalar(10000.0, a), (p / 4.25,), 11.0),
        "aten.amax.default": Case(lambda a: aten.amax.default(a, [-1]), (x,), 0.0),
        "aten._log_softmax_backward_data.default": Case(
            lambda g, o: aten._log_softmax_backward_data.default(g, o, -1, torch.float32), (y, torch.log_softmax(x, -1)),
            1.0, 1.0,
        ),
        "aten.nll_loss_forward.default": Case(
            lambda lp: aten.nll_loss_forward.default(lp, target, None, 1, -100), (logp,), 1.0, 1.0
        ),
        "aten.nll_loss_backward.default": Case(
            lambda g, lp, w: aten.nll_loss_backward.default(g, lp, target, None, 1, -100, w),
            (torch.tensor(0.7), logp, torch.tensor(6.0)), 0.5,
        ),
        "aten.embedding.default": Case(lambda t: aten.embedding.default(t, idx), (table,), 0.0),
        "aten.embedding_dense_backward.default": Case(
            lambda g: aten.embedding_dense_backward.default(g, idx, 5, -1, False), (randn(2, 3, 6),), 1.0, 1.0
        ),
        "aten._foreach_norm.Scalar": Case(lambda a, b: aten._foreach_norm.Scalar([a, b], 2), (x, randn(7)), 1.0),
        "aten._foreach_mul_.Scalar": Case(lambda a: aten._foreach_mul_.Scalar([a], 0.375), (x,), 0.5, inplace=True),
        "aten._foreach_mul_.Tensor": Case(
            lambda a, c: aten._foreach_mul_.Tensor([a], c), (x, torch.tensor(0.3)), 0.5, inplace=True
        ),
        "aten._foreach_add_.Scalar": Case(lambda a: aten._foreach_add_.Scalar([a], 1.0), (x,), 0.5, inplace=True),
    }  # fmt: skip


def _float64(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.double() if v.dtype == torch.float32 else v.clone()
    return v


def _outputs(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _outputs(o)]
    return []


def ulps(got: torch.Tensor, want: torch.Tensor, scale: float) -> float:
    """Worst |got - want| in units of the float32 spacing at max(|want|, scale); 0 when both are equal."""
    g, w = got.double().numpy().ravel(), want.double().numpy().ravel()
    at = np.maximum(np.abs(w), scale).astype(np.float32)
    return float(np.max(np.abs(g - w) / np.spacing(at).astype(np.float64), initial=0.0))


def run_case(case: Case) -> tuple[float, set[str]]:
    """(the worst error in ulps, the ops the mode ran)."""
    args32 = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)
    args64 = tuple(_float64(a) for a in case.args)
    with CanonicalMode(kernels.get_backend("cpu")) as mode:
        got = case.fn(*args32)
    want = case.fn(*args64)
    if case.inplace:
        got, want = args32[0], args64[0]
    pairs = list(zip(_outputs(got), _outputs(want), strict=True))
    assert pairs and all(g.dtype in (torch.float32, torch.int64) for g, _ in pairs)
    return max(ulps(g, w, case.scale) for g, w in pairs), set(mode.calls)


CASE_TABLE = _cases()


@pytest.mark.parametrize("name", sorted(CASE_TABLE))
def test_within_its_ulp_bound_of_float64(name):
    case = CASE_TABLE[name]
    err, ran = run_case(case)
    assert name.split(" ")[0] in ran  # the entry itself ran, not a decomposition of it
    assert err <= case.ulps, f"{name}: {err:.3f} ulps, bound {case.ulps}"


def f32(v: float) -> float:
    return float(np.float32(v))


def test_adamw_fused_within_its_bound_of_float64():
    # _fused_adamw_ (with a float and a tensor lr) and _foreach_add_ (the step counters), against AdamW in float64
    # with the hyperparameters the table uses: each rounded once to float32 (section 8.7).
    for lr in (1e-2, torch.tensor(1e-2)):
        p32 = randn(5, 4).requires_grad_()
        p64 = p32.detach().double().requires_grad_()
        opt32 = torch.optim.AdamW([p32], lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, fused=True)
        opt64 = torch.optim.AdamW([p64], lr=f32(1e-2), betas=(f32(0.9), f32(0.999)), eps=f32(1e-8),
                                  weight_decay=f32(0.1), foreach=False)  # fmt: skip
        for _ in range(3):
            g = randn(5, 4)
            p32.grad, p64.grad = g.clone(), g.double()
            with CanonicalMode(kernels.get_backend("cpu")) as mode:
                opt32.step()
            opt64.step()
        assert {"aten._fused_adamw_.tensor_lr" if isinstance(lr, torch.Tensor) else "aten._fused_adamw_.default"} <= (
            set(mode.calls)
        )
        assert ulps(p32.detach(), p64.detach(), 1.0) <= 2.0
        assert ulps(opt32.state[p32]["exp_avg_sq"], opt64.state[p64]["exp_avg_sq"], 0.0) <= 2.0


def test_arange_is_exact():
    with CanonicalMode(kernels.get_backend("cpu")) as mode:
        got = [aten.arange.default(5), aten.arange.start(2, 7), aten.arange.start_step(1, 9, 3, dtype=torch.float32)]
    assert [g.tolist() for g in got] == [[0, 1, 2, 3, 4], [2, 3, 4, 5, 6], [1.0, 4.0, 7.0]]
    assert {"aten.arange.default", "aten.arange.start", "aten.arange.start_step"} <= set(mode.calls)


def test_every_table_entry_has_a_float64_check():
    covered = {name.split(" ")[0] for name in CASE_TABLE}
    covered |= {"aten._fused_adamw_.default", "aten._fused_adamw_.tensor_lr", "aten.arange.default",
                "aten.arange.start", "aten.arange.start_step"}  # fmt: skip
    gen = torch.Generator().manual_seed(5)
    for fn in CASES.values():  # tests/lab/test_lab_ops.py's, compared with float64 torch there
        x = torch.randn(3, 5, 7, generator=gen)
        with CanonicalMode(kernels.get_backend("cpu")) as mode:
            fn(x)
        covered |= set(mode.calls)
    for fn in BACKWARDS.values():
        w, x = torch.randn(6, 4, generator=gen).requires_grad_(), torch.randn(5, 6, generator=gen)
        with CanonicalMode(kernels.get_backend("cpu")) as mode:
            fn(x, w).backward()
        covered |= set(mode.calls)
    assert sorted(set(TABLE) - covered) == []
