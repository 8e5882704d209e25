"""Op table 1: every aten operation the strict mode runs, and the ones it refuses with a named reason.

Three kinds of entry (docs/arithmetic.md section 8 defines each):

- TABLE: operations that compute values; each entry runs the canonical
  kernel and never torch's own kernel (tests/lab make every stock kernel of
  these raise and train a step anyway);
- EXACT: views, copies, creation of constants, comparisons and selections,
  which no instruction set or thread count can change; torch runs them,
  after an optional check (a dtype conversion must be exact);
- everything else is refused by name; REASONS says why for the usual ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from p2paudit.lab.context import Handler, OpContext
from p2paudit.lab.convert import EXACT_INT, view, wrap
from p2paudit.lab.ops_elementwise import ELEMENTWISE
from p2paudit.lab.ops_gpt2 import GPT2
from p2paudit.lab.ops_nn import NN
from p2paudit.lab.ops_optim import OPTIM
from p2paudit.lab.ops_reduce import REDUCTIONS
from p2paudit.lab.refusal import refused

Check = Callable[[str, dict[str, Any]], None]
VALUE_DTYPES = (torch.float32, torch.int64, torch.bool)
_EXACT_INTO_F32 = (torch.int64, torch.int32, torch.bool, torch.float32)


def _integer_scalar(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        raise refused(name, f"a bound of {value!r} (arange's bounds and step must be integers)")
    if abs(value) > EXACT_INT:
        raise refused(name, f"a bound of {value!r} beyond 2^24 (not exact in float32)")
    return int(value)


def arange(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """start, start + step, ... below end, with integer start, end and step: exact in int64 and float32."""
    start = _integer_scalar(name, a.get("start", 0) if "start" in a else 0)
    end = _integer_scalar(name, a["end"])
    step = _integer_scalar(name, a.get("step", 1) if a.get("step") is not None else 1)
    dtype = a.get("dtype") or torch.int64
    if dtype not in (torch.int64, torch.float32):
        raise refused(name, f"dtype {dtype} (arange makes int64 or float32 here)")
    values = np.arange(start, end, step, dtype=np.int64)
    return wrap(values.astype(np.float32) if dtype == torch.float32 else values)


def _check_conversion(name: str, src: torch.Tensor, dtype: torch.dtype | None) -> None:
    """A conversion the table allows: to the same dtype, int/bool to float32 below 2^24, float32 to int64."""
    if dtype is None or dtype == src.dtype:
        return
    if dtype == torch.float32 and src.dtype in _EXACT_INTO_F32:
        values = view(src)
        if values.dtype.kind in "iu" and values.size and int(np.max(np.abs(values))) > EXACT_INT:
            raise refused(name, "an integer above 2^24 converted to float32 (not exact)")
        return
    if dtype in (torch.int64, torch.bool) and src.dtype in (torch.float32, torch.int64, torch.bool):
        return
    raise refused(name, f"a conversion from {src.dtype} to {dtype} (op table 1 computes float32 values)")


def check_to_copy(name: str, a: dict[str, Any]) -> None:
    """_to_copy: an exact dtype conversion on the CPU."""
    device = a.get("device")
    if device is not None and torch.device(device).type != "cpu":
        raise refused(name, f"a copy to {device} (this build's lab mode computes on the host)")
    _check_conversion(name, a["self"], a.get("dtype"))


def check_copy_(name: str, a: dict[str, Any]) -> None:
    """copy_: src converted exactly into self's dtype."""
    _check_conversion(name, a["src"], a["self"].dtype)


TABLE: dict[str, Handler] = {
    **ELEMENTWISE,
    **GPT2,
    **REDUCTIONS,
    **NN,
    **OPTIM,
    "aten.arange.default": arange,
    "aten.arange.start": arange,
    "aten.arange.start_step": arange,
}

_VIEWS = (
    "t.default transpose.int permute.default view.default _unsafe_view.default expand.default slice.Tensor "
    "select.int split.Tensor split_with_sizes.default unbind.int unsqueeze.default squeeze.dim squeeze.dims "
    "squeeze.default as_strided.default detach.default alias.default unfold.default"
)
_COPIES = (
    "clone.default cat.default stack.default lift_fresh.default _local_scalar_dense.default slice_backward.default "
    "select_backward.default index_select.default index.Tensor repeat.default flip.default roll.default "
    "masked_fill.Scalar masked_fill.Tensor where.self where.ScalarSelf where.ScalarOther where.Scalar tril.default "
    "triu.default"
)
_CREATION = (
    "zeros.default zeros_like.default ones.default ones_like.default empty.memory_format empty_like.default "
    "new_zeros.default new_empty.default new_empty_strided.default new_ones.default full.default full_like.default fill_.Scalar zero_.default "
    "scalar_tensor.default"
)
_COMPARISONS = (
    "eq.Scalar eq.Tensor ne.Scalar ne.Tensor lt.Scalar lt.Tensor le.Scalar le.Tensor gt.Scalar gt.Tensor "
    "ge.Scalar ge.Tensor logical_not.default logical_and.default logical_or.default isnan.default abs.default"
)
EXACT: dict[str, Check | None] = {
    **{f"aten.{op}": None for group in (_VIEWS, _COPIES, _CREATION, _COMPARISONS) for op in group.split()},
    "aten._to_copy.default": check_to_copy,
    "aten.copy_.default": check_copy_,
    "profiler._record_function_enter_new.default": None,
    "profiler._record_function_exit._RecordFunction": None,
}

_SINGLE_TENSOR_ADAMW = "AdamW's single-tensor or foreach path: use torch.optim.AdamW(params, fused=True)"
_RANDOM = "random numbers (dropout and sampling are outside op table 1)"
REASONS: dict[str, str] = {
    "aten.native_dropout.default": _RANDOM,
    "aten.native_dropout_backward.default": _RANDOM,
    "aten.bernoulli_.float": _RANDOM,
    "aten.bernoulli.default": _RANDOM,
    "aten.rand.default": _RANDOM,
    "aten.randn.default": _RANDOM,
    "aten.uniform_.default": _RANDOM,
    "aten.normal_.default": _RANDOM,
    "aten.lerp_.Scalar": _SINGLE_TENSOR_ADAMW,
    "aten.addcmul_.default": _SINGLE_TENSOR_ADAMW,
    "aten.addcdiv_.default": _SINGLE_TENSOR_ADAMW,
    "aten._foreach_lerp_.Scalar": _SINGLE_TENSOR_ADAMW,
    "aten._foreach_addcmul_.Scalar": _SINGLE_TENSOR_ADAMW,
    "aten._foreach_addcdiv_.ScalarList": _SINGLE_TENSOR_ADAMW,
    "aten._fused_adam_.default": "Adam with L2 weight decay (the table has AdamW: torch.optim.AdamW(fused=True))",
    "aten.erf.default": "erf has no canonical definition in op table 1 (GELU: use approximate='tanh')",
    "aten.scatter_add.default": "a scatter-add in an order torch chooses",
    "aten.index_put.default": "a scatter: with repeated indices torch may write them in any order or add them",
    "aten.index_put_.default": "a scatter: with repeated indices torch may write them in any order or add them",
    "aten.index_add.default": "a scatter-add in an order torch chooses",
}


def reason_for(name: str) -> str:
    """Why `name` is refused: the named reason, or that the table has no canonical definition for it."""
    return REASONS.get(name, "no canonical definition: every op that computes a value must be in the table")
