"""The forward pass of the decoder-only transformer, built only on kernel calls.

Shape legend: B sequences, T = seq_len positions, N = B*T tokens, C = n_embd,
H = n_head, D = C / H, F = mlp_mult * C, V = vocab_size, BH = B*H.

    x0 = wte[idx] + wpe[pos]                                   # (N, C)
    per block l:  a1 = rmsnorm(x, ln1); q, k, v = a1 @ wq, a1 @ wk, a1 @ wv
                  o = attention(heads(q), heads(k), heads(v)); x = x + merge(o) @ wo
                  a2 = rmsnorm(x, ln2); x = x + silu(a2 @ w_fc) @ w_proj
    xf = rmsnorm(x, ln_f); logits = xf @ head^T; loss = cross_entropy(logits, targets)

The llama family (docs/engine.md, "Model families") changes three things:
x0 = wte[idx] (no wpe); q and k are rotated per head after the split,
q = rope(heads(q)), k = rope(kv_heads(k)), and k and v are repeated to the
query heads (grouped-query attention, G = n_head / n_kv_head); and the MLP is
SwiGLU, x = x + (silu(a2 @ w_gate) * (a2 @ w_up)) @ w_proj.

Residual adds, reshapes and transposes between the kernels are the backend's
too (`be.add`, `be.split_heads`, ...: float32 exactly rounded, or exact copies;
on numpy they are the numpy expressions of kernels/numpy_layout.py), so the
arrays stay the backend's own from the first kernel to the last (docs/engine.md,
"Where the arrays live"). `trace(name, value)` is called after every operation,
in execution order, always with a numpy array (a device array is copied to the
host for it: the debugging path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.backend_contract import Backend
from p2paudit.engine.config import ModelConfig
from p2paudit.engine.rope import rope_tables
from p2paudit.errors import InputError

Trace = Callable[[str, np.ndarray], None]
LayerDone = Callable[[], None]  # told that one more block's forward (or backward) pass is done
NORM_EPS = np.float32(1e-5)


def emit(trace: Trace | None, name: str, value: np.ndarray) -> np.ndarray:
    """Report `value` under `name` to the trace, if any, and return it."""
    if trace is not None:
        trace(name, value)
    return value


def host_trace(trace: Trace | None, be: Backend[Any]) -> Trace | None:
    """A trace that gets every value as a numpy array (be.to_host of it); None stays None."""
    if trace is None:
        return None
    return lambda name, value: trace(name, be.to_host(value))


def prefixed(trace: Trace | None, prefix: str) -> Trace | None:
    """A trace that prepends `prefix` to every op name (None stays None)."""
    if trace is None:
        return None
    return lambda name, value: trace(prefix + name, value)


@dataclass(frozen=True)
class LayerCache:
    """What one block's backward pass needs from its forward pass."""

    x_in: np.ndarray  # (N, C) block input
    a1: np.ndarray  # (N, C) rmsnorm(x_in, ln1)
    rstd1: np.ndarray  # (N,)
    q: np.ndarray  # (BH, T, D)
    k: np.ndarray  # (BH, T, D)
    v: np.ndarray  # (BH, T, D)
    p: np.ndarray  # (BH, T, T) attention probabilities
    o: np.ndarray  # (N, C) merged attention output
    x_mid: np.ndarray  # (N, C) after the attention residual
    a2: np.ndarray  # (N, C) rmsnorm(x_mid, ln2)
    rstd2: np.ndarray  # (N,)
    h: np.ndarray  # (N, F) a2 @ w_fc (llama: a2 @ w_gate)
    g: np.ndarray  # (N, F) silu(h) (llama: silu(h) * up), w_proj's input
    up: np.ndarray | None = None  # llama: (N, F) a2 @ w_up
    act: np.ndarray | None = None  # llama: (N, F) silu(h)


@dataclass(frozen=True)
class RopeTables:
    """The rotary tables of rope.rope_tables as the backend's arrays, (T, D/2) each."""

    cos: np.ndarray
    sin: np.ndarray
    sin_neg: np.ndarray  # -sin: the backward pass's rotation


@dataclass(frozen=True)
class ForwardCache:
    """Everything the backward pass reads, plus the micro-batch loss; arrays are the backend's."""

    idx: np.ndarray  # (N,) int64 input tokens
    pos: np.ndarray  # (N,) int64 positions
    targets: np.ndarray  # (N,) int64 next tokens
    layers: tuple[LayerCache, ...]
    x_last: np.ndarray  # (N, C) output of the last block
    xf: np.ndarray  # (N, C) rmsnorm(x_last, ln_f)
    rstdf: np.ndarray  # (N,)
    logits: np.ndarray  # (N, V)
    loss: np.ndarray  # 0-d float32 (np.float32 on numpy backends)
    rope: RopeTables | None = None  # llama: the rotary tables the forward pass used


def check_tokens(tokens: np.ndarray, model: ModelConfig) -> None:
    """InputError unless tokens is int64 (B, seq_len + 1) with ids in [0, vocab_size)."""
    T = model.seq_len
    if not isinstance(tokens, np.ndarray) or tokens.dtype != np.int64 or tokens.ndim != 2:
        raise InputError("micro-batch tokens must be a 2-d int64 array")
    if tokens.shape[1] != T + 1 or tokens.shape[0] < 1:
        raise InputError(f"micro-batch has shape {tokens.shape}, want (B >= 1, {T + 1})")
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or hi >= model.vocab_size:
        raise InputError(f"token ids span [{lo}, {hi}], want [0, {model.vocab_size})")


def head_weight(params: dict[str, np.ndarray], model: ModelConfig) -> np.ndarray:
    """The (V, C) output head: wte when tied, lm_head otherwise."""
    return params["params/wte"] if model.tied_head else params["params/lm_head"]


def attention_inputs(
    a1: np.ndarray,
    state: dict[str, np.ndarray],
    p: str,
    model: ModelConfig,
    be: Backend[Any],
    tr: Trace | None,
    rope: RopeTables | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v (BH, T, D) of a1 (N, C): projected, split into heads, rotated (llama), k and v repeated (GQA)."""
    T, H, KV = model.seq_len, model.n_head, model.kv_heads
    B = a1.shape[0] // T
    q = be.split_heads(emit(tr, "attn.q", be.matmul(a1, state[p + "attn.wq"])), B, T, H)  # (BH, T, D)
    k = be.split_heads(emit(tr, "attn.k", be.matmul(a1, state[p + "attn.wk"])), B, T, KV)  # (B KV, T, D)
    v = be.split_heads(emit(tr, "attn.v", be.matmul(a1, state[p + "attn.wv"])), B, T, KV)  # (B KV, T, D)
    if rope is not None:
        q = emit(tr, "attn.q.rope", be.rope(q, rope.cos, rope.sin))
        k = emit(tr, "attn.k.rope", be.rope(k, rope.cos, rope.sin))
    if KV != H:
        k = emit(tr, "attn.k.repeat", be.repeat_heads(k, H // KV))  # (BH, T, D)
        v = emit(tr, "attn.v.repeat", be.repeat_heads(v, H // KV))  # (BH, T, D)
    return q, k, v


def block_forward(
    x: np.ndarray,
    state: dict[str, np.ndarray],
    layer: int,
    model: ModelConfig,
    be: Backend[Any],
    tr: Trace | None,
    rope: RopeTables | None = None,
) -> tuple[np.ndarray, LayerCache]:
    """One pre-norm block on x (N, C) of B sequences; returns (x_out (N, C), cache). rope: llama's tables."""
    p = f"params/h.{layer}."
    N, _ = x.shape
    T, H = model.seq_len, model.n_head
    B = N // T
    a1, rstd1 = be.rmsnorm(x, state[p + "ln1"], NORM_EPS)  # (N, C), (N,)
    emit(tr, "ln1", a1)
    emit(tr, "ln1.rstd", rstd1)
    q, k, v = attention_inputs(a1, state, p, model, be, tr, rope)  # (BH, T, D) x3
    o_h, probs = be.attention(q, k, v)  # (BH, T, D), (BH, T, T)
    emit(tr, "attn.softmax", probs)
    o = be.merge_heads(emit(tr, "attn.pv", o_h), B, H)  # (N, C)
    y = emit(tr, "attn.proj", be.matmul(o, state[p + "attn.wo"]))  # (N, C)
    x_mid = emit(tr, "resid1", be.add(x, y))  # (N, C)
    a2, rstd2 = be.rmsnorm(x_mid, state[p + "ln2"], NORM_EPS)  # (N, C), (N,)
    emit(tr, "ln2", a2)
    emit(tr, "ln2.rstd", rstd2)
    up = act = None
    if model.is_llama:  # SwiGLU
        h = emit(tr, "mlp.gate", be.matmul(a2, state[p + "mlp.w_gate"]))  # (N, F)
        up = emit(tr, "mlp.up", be.matmul(a2, state[p + "mlp.w_up"]))  # (N, F)
        act = emit(tr, "mlp.silu", be.silu(h))  # (N, F)
        g = emit(tr, "mlp.swiglu", be.mul(act, up))  # (N, F)
    else:
        h = emit(tr, "mlp.fc", be.matmul(a2, state[p + "mlp.w_fc"]))  # (N, F)
        g = emit(tr, "mlp.silu", be.silu(h))  # (N, F)
    z = emit(tr, "mlp.proj", be.matmul(g, state[p + "mlp.w_proj"]))  # (N, C)
    x_out = emit(tr, "resid2", be.add(x_mid, z))  # (N, C)
    cache = LayerCache(x, a1, rstd1, q, k, v, probs, o, x_mid, a2, rstd2, h, g, up, act)
    return x_out, cache


def forward(
    state: dict[str, Any], tokens: np.ndarray, model: ModelConfig, be: Backend[Any], trace: Trace | None = None
) -> ForwardCache:
    """The forward pass of one micro-batch `tokens` (B, T+1): inputs tokens[:, :-1], targets tokens[:, 1:].

    tokens is numpy, checked here (InputError); state's arrays are numpy or the backend's.
    """
    check_tokens(tokens, model)
    if not isinstance(state["params/wte"], np.ndarray):
        tokens = be.to_device(tokens)  # the state is on the device: the tokens go there too
    return forward_checked(state, tokens, model, be, host_trace(trace, be))


def forward_checked(
    state: dict[str, np.ndarray],
    tokens: np.ndarray,
    model: ModelConfig,
    be: Backend[Any],
    trace: Trace | None = None,
    *,
    on_layer: LayerDone | None = None,
) -> ForwardCache:
    """forward() on tokens already checked by check_tokens, in the kind of array state holds.

    Every array stays the backend's (no host copy), except what `trace` is
    given: pass a host_trace. `on_layer()` is called after each block (progress).
    """
    idx, targets, pos = be.split_tokens(tokens)  # (N,) x3
    tok_emb = emit(trace, "fwd/wte", be.embedding(state["params/wte"], idx))  # (N, C)
    rope = None
    if model.is_llama:  # rotary positions: no position embedding
        x = tok_emb
        rope = RopeTables(*(be.to_device(table) for table in rope_tables(model)))
    else:
        pos_emb = emit(trace, "fwd/wpe", be.embedding(state["params/wpe"], pos))  # (N, C)
        x = emit(trace, "fwd/x0", be.add(tok_emb, pos_emb))  # (N, C)
    layers = []
    for layer in range(model.n_layer):
        x, cache = block_forward(x, state, layer, model, be, prefixed(trace, f"fwd/h.{layer}/"), rope)
        layers.append(cache)
        if on_layer is not None:
            on_layer()
    xf, rstdf = be.rmsnorm(x, state["params/ln_f"], NORM_EPS)  # (N, C), (N,)
    emit(trace, "fwd/ln_f", xf)
    emit(trace, "fwd/ln_f.rstd", rstdf)
    logits = emit(trace, "fwd/logits", be.matmul_nt(xf, head_weight(state, model)))  # (N, V)
    loss = emit(trace, "fwd/loss", be.cross_entropy(logits, targets))  # 0-d
    return ForwardCache(idx, pos, targets, tuple(layers), x, xf, rstdf, logits, loss, rope)
