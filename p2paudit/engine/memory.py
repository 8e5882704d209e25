"""How much memory a train step and a replay of a config need, estimated before anything is allocated.

Counted from what engine.step, engine.model and engine.backward keep alive at
once (P = parameters, N = batch_size * seq_len tokens of one micro-batch,
C = n_embd, F = the MLP width (model.mlp_hidden), V = vocab_size, H = n_head, T = seq_len, L =
n_layer, k = log2(micro_batches); every float is 4 bytes):

- the state: parameters and the two AdamW moments, 3P;
- while a micro-batch runs: the gradient tree holds up to k finished sets and
  the one being built, (k + 1)P, plus that micro-batch's activations A;
- while the update runs: the old state, the summed gradients and the new
  state, 7P (apply_update builds a new dict; nothing is updated in place).

A (floats) = L (7NC + 2NF + 2N + HBT^2)            the per-layer forward cache (llama: 4NF)
           + 2NC + N + 3NV + 2VC                    last block, logits, dlogits, the
                                                    cross-entropy temporary, head grads
           + 12NC + 2NF + 3HBT^2 + 6N               one layer's backward temporaries (llama: 4NF),
                                                    attention scores, int64 indices

train step = 4 max(3P + (k + 1)P + A, 3P + (k + 2)P, 7P) + the token stream and
the step's int64 batch; a replay holds one more state (the checkpoint of the
next state, read for comparison): train step + 12P. A run on W processes on one
machine holds W of everything. The estimate is checked against a measured
peak in tests/engine/test_memory.py.

A streaming replay (engine.streaming, audit.streamed_replay) holds the
parameters, one gradient set and one micro-batch's activations, plus a few
tensors of the largest size S at a time (a partial sum read back and the sum
being formed; in the update the gradient / M, both moments and the three new
tensors): 4 (2P + A + 6S) + data, and k P more when the partial sums wait in
memory instead of on disk (`plan_replay` decides).

`available_bytes` reads MemAvailable from /proc/meminfo (falling back to
os.sysconf), a kernel pseudo-file rather than data: the one read this module does.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from p2paudit.engine.config import TrainConfig, check_sizes, count_parameters
from p2paudit.engine.state import param_shapes
from p2paudit.errors import InputError

FLOAT_BYTES = 4
MEMINFO = "/proc/meminfo"


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a config needs: the parts, and the peaks of a train step and of a replay (one process)."""

    parameters: int  # P floats
    gradients: int  # the gradient sets held at the peak
    moments: int  # the two AdamW moments
    activations: int  # one micro-batch's forward cache and backward temporaries
    data: int  # the token stream and one step's int64 batch
    train_step: int
    replay: int
    streaming_replay: int  # with the partial gradient sums on disk
    waiting_sums: int  # what the partial sums take when they wait in memory instead

    def streaming_in_memory(self) -> int:
        return self.streaming_replay + self.waiting_sums

    def describe(self) -> str:
        return (
            f"train step {format_bytes(self.train_step)}, replay {format_bytes(self.replay)} "
            f"(streaming {format_bytes(self.streaming_replay)}) "
            f"(parameters {format_bytes(self.parameters)}, gradients {format_bytes(self.gradients)}, "
            f"AdamW moments {format_bytes(self.moments)}, activations {format_bytes(self.activations)})"
        )


def format_bytes(n: int) -> str:
    """`n` bytes in GiB, MiB or KiB with two decimals."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def activation_floats(cfg: TrainConfig) -> int:
    """Floats of one micro-batch's activations and backward temporaries (see the module docstring)."""
    m = cfg.model
    B, T, C, V, H, L = cfg.batch_size, m.seq_len, m.n_embd, m.vocab_size, m.n_head, m.n_layer
    F, N = m.mlp_hidden, cfg.batch_size * m.seq_len
    mlp = 4 if m.is_llama else 2  # (N, F) arrays: llama's SwiGLU keeps gate, up, silu and their product
    scores = H * B * T * T
    per_layer = 7 * N * C + mlp * N * F + 2 * N + scores
    head = 2 * N * C + N + 3 * N * V + 2 * V * C
    backward_temps = 12 * N * C + mlp * N * F + 3 * scores + 6 * N
    return L * per_layer + head + backward_temps


def estimate_memory(cfg: TrainConfig, data_tokens: int = 0, token_bytes: int = 1) -> MemoryEstimate:
    """The bytes one process needs to train a step of `cfg` and to replay one; nothing is allocated.

    `data_tokens` tokens of `token_bytes` bytes each are the loaded token stream.
    """
    check_sizes(cfg)
    P = count_parameters(cfg.model)
    k = cfg.micro_batches.bit_length() - 1  # micro_batches is a power of two
    A = activation_floats(cfg)
    floats = max(3 * P + (k + 1) * P + A, 3 * P + (k + 2) * P, 7 * P)
    data = data_tokens * token_bytes + cfg.micro_batches * cfg.batch_size * (cfg.model.seq_len + 1) * 8
    train = FLOAT_BYTES * floats + data
    largest = max(math.prod(shape) for shape in param_shapes(cfg.model).values())
    return MemoryEstimate(
        parameters=FLOAT_BYTES * P,
        gradients=FLOAT_BYTES * (k + 2) * P,
        moments=FLOAT_BYTES * 2 * P,
        activations=FLOAT_BYTES * A,
        data=data,
        train_step=train,
        replay=train + FLOAT_BYTES * 3 * P,
        streaming_replay=FLOAT_BYTES * (2 * P + A + 6 * largest) + data,
        waiting_sums=FLOAT_BYTES * k * P,
    )


@dataclass(frozen=True)
class ReplayPlan:
    """How a replay runs: whole states in memory, or streamed (partial sums on disk when `spill`)."""

    streaming: bool
    spill: bool


REPLAY_MODES = ("auto", "in-memory", "streaming")


def plan_replay(estimate: MemoryEstimate, mode: str = "auto", have: int | None = None) -> ReplayPlan:
    """`mode` "in-memory" or "streaming" as asked; "auto" streams when the in-memory replay does not fit
    in `have` bytes (None: unknown, in memory). A stream spills its partial sums to disk unless they fit too."""
    if mode not in REPLAY_MODES:
        raise InputError(f"replay mode {mode!r}, want one of {', '.join(REPLAY_MODES)}")
    streaming = mode == "streaming" or (mode == "auto" and have is not None and estimate.replay > have)
    spill = streaming and (have is None or estimate.streaming_in_memory() > have)
    return ReplayPlan(streaming, spill)


def available_bytes() -> int | None:
    """Memory this machine can give without swapping (MemAvailable), or None when it cannot be told."""
    try:
        with open(MEMINFO, "rb") as f:
            for line in f.read(1 << 16).decode("ascii", "replace").splitlines():
                if line.startswith("MemAvailable:"):
                    parts = line.split()
                    if len(parts) == 3 and parts[1].isdigit() and parts[2] == "kB":
                        return int(parts[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def check_fits(need: int, what: str, override_flag: str = "--ignore-memory-check") -> int | None:
    """InputError (one line) if `need` bytes exceed the memory available; returns what is available."""
    have = available_bytes()
    if have is not None and need > have:
        raise InputError(
            f"{what} needs about {format_bytes(need)} of memory but {format_bytes(have)} is available; "
            f"use a smaller config or pass {override_flag} if you know better"
        )
    return have
