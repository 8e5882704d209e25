"""The hand-written backward pass of model.forward, on the same kernels.

Gradients are of the micro-batch loss (the mean over its N tokens). Where a
value receives two contributions, the order of the float32 add is fixed and
documented in docs/engine.md: residual stream `upstream + branch`, the three
attention input projections `(from q + from k) + from v`, the tied embedding
`from head + from lookup`; llama's SwiGLU input `from gate + from up`, and
grouped-query attention's k and v gradients, each the left-to-right sum of
its group's query heads (be.sum_head_groups). Those adds, and the head splits and merges, are
the backend's (`be.add`, ...), so the arrays stay the backend's throughout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.backend_contract import Backend
from p2paudit.engine.config import ModelConfig
from p2paudit.engine.model import (
    ForwardCache,
    LayerCache,
    LayerDone,
    RopeTables,
    Trace,
    emit,
    head_weight,
    host_trace,
    prefixed,
)
from p2paudit.engine.state import param_shapes


def block_backward(
    dx_out: np.ndarray,
    c: LayerCache,
    state: dict[str, np.ndarray],
    layer: int,
    model: ModelConfig,
    be: Backend[Any],
    tr: Trace | None,
    grads: dict[str, np.ndarray],
    rope: RopeTables | None = None,
) -> np.ndarray:
    """Backward through block `layer` given dx_out (N, C); writes its weight grads into `grads`, returns dx_in."""
    p, g_ = f"params/h.{layer}.", f"h.{layer}."
    N, _ = dx_out.shape
    T, H, KV = model.seq_len, model.n_head, model.kv_heads
    B = N // T
    # MLP branch: z = silu(a2 @ w_fc) @ w_proj (llama: z = (silu(a2 @ w_gate) * (a2 @ w_up)) @ w_proj)
    grads[g_ + "mlp.w_proj"] = emit(tr, "mlp.proj.dw", be.matmul_tn(c.g, dx_out))  # (F, C)
    dg = emit(tr, "mlp.proj.dx", be.matmul_nt(dx_out, state[p + "mlp.w_proj"]))  # (N, F)
    if c.up is not None and c.act is not None:
        dup = emit(tr, "mlp.up.dy", be.mul(dg, c.act))  # (N, F)
        dh = emit(tr, "mlp.silu", be.silu_backward(c.h, emit(tr, "mlp.silu.dy", be.mul(dg, c.up))))  # (N, F)
        grads[g_ + "mlp.w_gate"] = emit(tr, "mlp.gate.dw", be.matmul_tn(c.a2, dh))  # (C, F)
        grads[g_ + "mlp.w_up"] = emit(tr, "mlp.up.dw", be.matmul_tn(c.a2, dup))  # (C, F)
        da2_gate = emit(tr, "mlp.gate.dx", be.matmul_nt(dh, state[p + "mlp.w_gate"]))  # (N, C)
        da2_up = emit(tr, "mlp.up.dx", be.matmul_nt(dup, state[p + "mlp.w_up"]))  # (N, C)
        da2 = emit(tr, "mlp.up.dx_acc", be.add(da2_gate, da2_up))  # (N, C): from gate + from up
    else:
        dh = emit(tr, "mlp.silu", be.silu_backward(c.h, dg))  # (N, F)
        grads[g_ + "mlp.w_fc"] = emit(tr, "mlp.fc.dw", be.matmul_tn(c.a2, dh))  # (C, F)
        da2 = emit(tr, "mlp.fc.dx", be.matmul_nt(dh, state[p + "mlp.w_fc"]))  # (N, C)
    dxn2, dln2 = be.rmsnorm_backward(c.x_mid, state[p + "ln2"], c.rstd2, da2)  # (N, C), (C,)
    emit(tr, "ln2.dx", dxn2)
    grads[g_ + "ln2"] = emit(tr, "ln2.dw", dln2)
    dx_mid = emit(tr, "resid2", be.add(dx_out, dxn2))  # (N, C)
    # Attention branch: y = merge(attention(q, k, v)) @ wo
    grads[g_ + "attn.wo"] = emit(tr, "attn.proj.dw", be.matmul_tn(c.o, dx_mid))  # (C, C)
    do = emit(tr, "attn.proj.dx", be.matmul_nt(dx_mid, state[p + "attn.wo"]))  # (N, C)
    dq_h, dk_h, dv_h = be.attention_backward(c.q, c.k, c.v, c.p, be.split_heads(do, B, T, H))  # (BH, T, D) x3
    if KV != H:  # grouped-query attention: each k/v head's gradient is its group's sum, left to right
        dk_h = emit(tr, "attn.dk.groups", be.sum_head_groups(dk_h, H // KV))  # (B KV, T, D)
        dv_h = emit(tr, "attn.dv.groups", be.sum_head_groups(dv_h, H // KV))  # (B KV, T, D)
    if rope is not None:  # the transpose of a rotation is the rotation by -angle
        dq_h = emit(tr, "attn.dq.rope", be.rope(dq_h, rope.cos, rope.sin_neg))
        dk_h = emit(tr, "attn.dk.rope", be.rope(dk_h, rope.cos, rope.sin_neg))
    dq = emit(tr, "attn.dq", be.merge_heads(dq_h, B, H))  # (N, C)
    dk = emit(tr, "attn.dk", be.merge_heads(dk_h, B, KV))  # (N, KV D)
    dv = emit(tr, "attn.dv", be.merge_heads(dv_h, B, KV))  # (N, KV D)
    da1 = None
    for name, d in (("wq", dq), ("wk", dk), ("wv", dv)):
        grads[g_ + "attn." + name] = emit(tr, f"attn.{name}.dw", be.matmul_tn(c.a1, d))  # (C, C or KV D)
        part = emit(tr, f"attn.{name}.dx", be.matmul_nt(d, state[p + "attn." + name]))  # (N, C)
        da1 = part if da1 is None else emit(tr, f"attn.{name}.dx_acc", be.add(da1, part))  # (N, C)
    dxn1, dln1 = be.rmsnorm_backward(c.x_in, state[p + "ln1"], c.rstd1, da1)  # (N, C), (C,)
    emit(tr, "ln1.dx", dxn1)
    grads[g_ + "ln1"] = emit(tr, "ln1.dw", dln1)
    return emit(tr, "resid1", be.add(dx_mid, dxn1))  # (N, C)


def backward(
    cache: ForwardCache,
    state: dict[str, np.ndarray],
    model: ModelConfig,
    be: Backend[Any],
    trace: Trace | None = None,
    *,
    on_layer: LayerDone | None = None,
) -> dict[str, np.ndarray]:
    """Gradients of cache.loss for every parameter, keyed by param name (no "params/"), in state order.

    The gradients are arrays of the kind cache and state hold (the backend's own).
    `on_layer()` is called after each block's backward pass (progress).
    """
    trace = host_trace(trace, be)
    grads: dict[str, np.ndarray] = {}
    dlogits = emit(trace, "bwd/logits", be.cross_entropy_backward(cache.logits, cache.targets, np.float32(1.0)))
    head = head_weight(state, model)
    dhead = emit(trace, "bwd/head.dw", be.matmul_tn(dlogits, cache.xf))  # (V, C)
    dxf = emit(trace, "bwd/head.dx", be.matmul(dlogits, head))  # (N, C)
    dx, dlnf = be.rmsnorm_backward(cache.x_last, state["params/ln_f"], cache.rstdf, dxf)  # (N, C), (C,)
    emit(trace, "bwd/ln_f.dx", dx)
    grads["ln_f"] = emit(trace, "bwd/ln_f.dw", dlnf)
    for layer in reversed(range(model.n_layer)):
        tr = prefixed(trace, f"bwd/h.{layer}/")
        dx = block_backward(dx, cache.layers[layer], state, layer, model, be, tr, grads, cache.rope)
        if on_layer is not None:
            on_layer()
    dwte = emit(trace, "bwd/wte.lookup", be.embedding_backward(cache.idx, dx, model.vocab_size))  # (V, C)
    if not model.is_llama:  # llama's positions are rotary: no wpe
        grads["wpe"] = emit(trace, "bwd/wpe", be.embedding_backward(cache.pos, dx, model.seq_len))  # (T, C)
    if model.tied_head:
        grads["wte"] = emit(trace, "bwd/wte", be.add(dhead, dwte))  # (V, C): head first, then lookup
    else:
        grads["wte"] = dwte
        grads["lm_head"] = dhead
    return {name: grads[name] for name in param_shapes(model)}
