"""Op table 1's optimizer entries: fused AdamW (section 4.6, the step counter from the state), the foreach ops.

torch.optim.AdamW(fused=True) calls `_foreach_add_(state_steps, 1)` and
then one `_fused_adamw_` over every parameter of a group; each parameter's
update is the backend's adamw with the step read from its float32 step
tensor (an integer below 2^24, checked), lr, betas, eps and weight decay
rounded once to float32. clip_grad_norm_ calls `_foreach_norm` (ops_reduce)
and `_foreach_mul_` with the clip coefficient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels import cpu_lab  # the cpu backend's in-place AdamW and scaling (numba)
from p2paudit.lab.context import Handler, OpContext
from p2paudit.lab.convert import EXACT_INT, F32, as_float32, host, scalar32, view
from p2paudit.lab.refusal import refused


def _write(t: Any, values: np.ndarray) -> None:
    view(t)[...] = values


def fused_adamw(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """p, m, v of every parameter updated in place by the backend's adamw (section 4.6); on cpu the kernel
    writes into the tensors' memory, elsewhere the new arrays are copied back."""
    if a["amsgrad"] or a["maximize"] or a.get("grad_scale") is not None or a.get("found_inf") is not None:
        raise refused(name, "amsgrad, maximize, grad_scale or found_inf (the table has plain AdamW)")
    lr = scalar32(name, a["lr"], "lr")
    beta1, beta2 = scalar32(name, a["beta1"], "beta1"), scalar32(name, a["beta2"], "beta2")
    eps, wd = scalar32(name, a["eps"], "eps"), scalar32(name, a["weight_decay"], "weight_decay")
    for p_t, g_t, m_t, v_t, s_t in zip(a["self"], a["grads"], a["exp_avgs"], a["exp_avg_sqs"], a["state_steps"]):
        step_value = float(host(s_t).reshape(()))
        if not step_value.is_integer() or not 1 <= step_value <= EXACT_INT:
            raise refused(name, f"a step counter of {step_value!r} (want an integer 1..2^24)")
        p, g, m, v = (host(t) for t in (p_t, g_t, m_t, v_t))
        if ctx.cpu and all(np.shares_memory(a, view(t)) for a, t in ((p, p_t), (m, m_t), (v, v_t))):
            cpu_lab.adamw_in_place(p, g, m, v, int(step_value), lr, beta1, beta2, eps, wd)  # host() copied none
            continue
        p2, m2, v2 = ctx.be.adamw(p, g, m, v, int(step_value), lr, beta1, beta2, eps, wd)
        _write(p_t, np.asarray(p2))
        _write(m_t, np.asarray(m2))
        _write(v_t, np.asarray(v2))
    return None


def foreach_scalar(op: Any) -> Handler:
    """In place x = op(x, float32(scalar)) for every tensor x of the list (one rounding each)."""

    def entry(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
        s = scalar32(name, a["scalar"], "the scalar")
        with np.errstate(all="ignore"):
            for t in a["self"]:
                _write(t, np.asarray(op(as_float32(name, view(t)), s), dtype=F32))
        return None

    return entry


def foreach_mul_tensor(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """In place x = x * c for every x of the list, c a float32 0-d tensor (clip_grad_norm_'s coefficient)."""
    c = host(a["other"])
    if c.dtype != np.float32 or c.size != 1:
        raise refused(name, f"a multiplier of dtype {c.dtype} and shape {c.shape} (want a float32 scalar)")
    with np.errstate(all="ignore"):
        for t in a["self"]:
            target = view(t)
            x = as_float32(name, target)
            if ctx.cpu and x is target and cpu_lab.scale_in_place(x, c.reshape(-1)[0]):
                continue  # written in place on every thread: the same products
            _write(t, np.asarray(x * c.reshape(()), dtype=F32))
    return None


OPTIM: dict[str, Handler] = {
    "aten._fused_adamw_.default": fused_adamw,
    "aten._fused_adamw_.tensor_lr": fused_adamw,
    "aten._foreach_add_.Scalar": foreach_scalar(np.add),
    "aten._foreach_mul_.Scalar": foreach_scalar(np.multiply),
    "aten._foreach_mul_.Tensor": foreach_mul_tensor,
}
