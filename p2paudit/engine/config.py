"""Model, optimiser and training configurations: frozen records with exact JSON round trips.

A `TrainConfig` is everything besides the data that decides a step's bits: the
model shape, the optimiser constants, the batch geometry and the run seed. The
run manifest stores `TrainConfig.to_dict()`; `TrainConfig.from_dict` checks
every key, exact type (an int is never a bool or a float, a float never an
int) and range, so a malformed manifest fails with a one-line InputError.

Every size is bounded before anything is allocated or looped over: a signed
`n_layer: 1e9` or `micro_batches: 2**40` is refused here, not discovered by
the allocator. The bounds admit GPT shapes up to about 2 billion parameters
(n_layer <= 64, n_embd <= 8192, vocab_size <= 2^17, seq_len <= 8192) and
steps of up to 2^22 tokens; `check_sizes` states them all.

Two families (docs/engine.md, "Model families"): `gpt` (learned positions,
multi-head attention, a SiLU MLP) and `llama` (rotary positions with base
`rope_theta`, grouped-query attention with `n_kv_head` key/value heads, a
SwiGLU MLP). A gpt config's dict has no `family`, `rope_theta` or `n_kv_head`
key, so every manifest written before the llama family is byte for byte what
it was; a llama config's dict has all three.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from p2paudit.errors import InputError

MAX_SEED = 2**64 - 1
# Size bounds (inclusive). Each admits the largest planned preset and refuses beyond it.
MAX_VOCAB = 2**17
MAX_SEQ_LEN = 8192
MAX_LAYERS = 64
MAX_EMBD = 8192
MAX_HEADS = 256
MAX_MLP_MULT = 16
MAX_PARAMS = 2**31  # parameters (not counting the optimiser moments): GPT-2 XL's 1.56e9 fits
MAX_BATCH = 2**16  # sequences per micro-batch
MAX_MICRO_BATCHES = 2**16
MAX_TOKENS_PER_STEP = 2**22  # micro_batches * batch_size * seq_len: 4M tokens (GPT-3's largest batch was 3.2M)
MAX_SCHEDULE_STEPS = 2**32  # warmup_steps and decay_steps; also the largest step count of a run
MAX_NAME_CHARS = 64
FAMILIES = ("gpt", "llama")
LLAMA_KEYS = ("family", "rope_theta", "n_kv_head")  # in a model dict exactly when the family is llama
MAX_ROPE_THETA = 1e9  # Llama 3 uses 500,000
SWIGLU_MULTIPLE = 256  # the SwiGLU width is rounded up to a multiple of this (Llama's `multiple_of`)


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer; n_embd must divide by n_head.

    family "gpt" leaves rope_theta 0.0 and n_kv_head 0 (unused); family "llama"
    sets rope_theta > 1 and 1 <= n_kv_head <= n_head with n_head % n_kv_head == 0.
    """

    name: str
    vocab_size: int
    seq_len: int
    n_layer: int
    n_head: int
    n_embd: int
    mlp_mult: int
    tied_head: bool
    family: str = "gpt"
    rope_theta: float = 0.0
    n_kv_head: int = 0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def is_llama(self) -> bool:
        return self.family == "llama"

    @property
    def kv_heads(self) -> int:
        """Key/value heads: n_kv_head for llama, n_head for gpt."""
        return self.n_kv_head if self.is_llama else self.n_head

    @property
    def mlp_hidden(self) -> int:
        """F: mlp_mult * C for gpt; for llama's SwiGLU 2/3 of that, rounded up to a multiple of 256."""
        width = self.mlp_mult * self.n_embd
        if not self.is_llama:
            return width
        return -(-2 * width // (3 * SWIGLU_MULTIPLE)) * SWIGLU_MULTIPLE

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not self.is_llama:
            for key in LLAMA_KEYS:
                del d[key]
        return d

    @classmethod
    def from_dict(cls, d: Any) -> ModelConfig:
        if isinstance(d, dict) and "family" not in d:
            present = [key for key in LLAMA_KEYS if key in d]
            if present:
                raise InputError(f'model key {present[0]} needs family "llama" (a gpt model omits it)')
            cfg = cls(**_check_fields(cls, d, "model", omitted=LLAMA_KEYS))
        else:
            cfg = cls(**_check_fields(cls, d, "model"))
            if cfg.family == "gpt":
                raise InputError('model family "gpt" is written by omitting family, rope_theta and n_kv_head')
        _check_model(cfg)
        return cfg


@dataclass(frozen=True)
class OptimConfig:
    """AdamW and its learning-rate schedule (see schedule.lr_at). Floats become float32 at use."""

    lr: float
    min_lr: float
    warmup_steps: int
    decay_steps: int
    beta1: float
    beta2: float
    eps: float
    weight_decay: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> OptimConfig:
        cfg = cls(**_check_fields(cls, d, "optim"))
        _check_optim(cfg)
        return cfg


@dataclass(frozen=True)
class TrainConfig:
    """One step reads micro_batches x batch_size sequences of seq_len + 1 tokens."""

    model: ModelConfig
    optim: OptimConfig
    batch_size: int
    micro_batches: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.to_dict(),
            "optim": self.optim.to_dict(),
            "batch_size": self.batch_size,
            "micro_batches": self.micro_batches,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, d: Any) -> TrainConfig:
        fields = _check_fields(cls, d, "train config")
        cfg = cls(
            model=ModelConfig.from_dict(fields["model"]),
            optim=OptimConfig.from_dict(fields["optim"]),
            batch_size=fields["batch_size"],
            micro_batches=fields["micro_batches"],
            seed=fields["seed"],
        )
        _check_train(cfg)
        return cfg


# Field types for from_dict; nested records are checked by their own from_dict.
_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool}


def _check_fields(cls: type, d: Any, what: str, omitted: tuple[str, ...] = ()) -> dict[str, Any]:
    """Check that `d` is a dict with exactly cls's fields but `omitted` (left at their defaults), each of its type."""
    if not isinstance(d, dict):
        raise InputError(f"{what} is a {type(d).__name__}, want an object")
    names = [f.name for f in dataclasses.fields(cls) if f.name not in omitted]
    unknown = sorted(set(d) - set(names))
    missing = [n for n in names if n not in d]
    if unknown:
        raise InputError(f"{what} has unknown key(s) {', '.join(map(str, unknown))}")
    if missing:
        raise InputError(f"{what} lacks key(s) {', '.join(missing)}")
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in omitted:
            continue
        want = _TYPES.get(str(f.type))
        value = d[f.name]
        if want is not None:
            value = _check_type(value, want, f"{what} key {f.name}")
        out[f.name] = value
    return out


def _check_type(value: Any, want: type, where: str) -> Any:
    # Exact types: a bool is not an int, an int is not a float (1 and 1.0 are two
    # encodings in JSON, and one config must have one encoding).
    if type(value) is not want:
        raise InputError(f"{where} is a {type(value).__name__}, want {want.__name__}")
    if isinstance(value, float) and not math.isfinite(value):  # type(value) is want, so want is float
        raise InputError(f"{where} is {value}, want a finite number")
    return value


def _is_pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def _check_range(value: int, low: int, high: int, where: str) -> None:
    if not low <= value <= high:
        raise InputError(f"{where} is {value}, want {low}..{high}")


def count_parameters(m: ModelConfig) -> int:
    """The number of parameters of `m` (as engine.state.param_shapes lays them out), without building them."""
    C, F, V, T = m.n_embd, m.mlp_hidden, m.vocab_size, m.seq_len
    if m.is_llama:  # no wpe; wk and wv are (C, n_kv_head * D); w_gate, w_up, w_proj
        KV = m.kv_heads * m.head_dim
        per_layer = 2 * C + 2 * C * C + 2 * C * KV + 3 * C * F
        return V * C + m.n_layer * per_layer + C + (0 if m.tied_head else V * C)
    per_layer = 2 * C + 4 * C * C + 2 * C * F
    return V * C + T * C + m.n_layer * per_layer + C + (0 if m.tied_head else V * C)


def _check_family(m: ModelConfig) -> None:
    if m.family not in FAMILIES:
        raise InputError(f"model family {m.family[:40]!r} is not one of {', '.join(FAMILIES)}")
    if not m.is_llama:
        if m.rope_theta != 0.0 or m.n_kv_head != 0:
            raise InputError("model family gpt takes no rope_theta or n_kv_head (they are llama's)")
        return
    if not 1.0 < m.rope_theta <= MAX_ROPE_THETA:
        raise InputError(f"model rope_theta is {m.rope_theta}, want a number in (1, {MAX_ROPE_THETA:g}]")
    _check_range(m.n_kv_head, 1, m.n_head, "model n_kv_head")
    if m.n_head % m.n_kv_head:
        raise InputError(f"model n_head {m.n_head} is not a multiple of n_kv_head {m.n_kv_head}")
    if m.head_dim % 2:
        raise InputError(f"model head size {m.head_dim} (n_embd / n_head) is odd; rotary positions need it even")


def _check_model(m: ModelConfig) -> None:
    if not (
        1 <= len(m.name) <= MAX_NAME_CHARS and m.name.isascii() and m.name.isprintable() and m.name.strip() == m.name
    ):
        raise InputError(f"model name {m.name[:80]!r} must be 1..{MAX_NAME_CHARS} printable ASCII characters")
    for key, high in (
        ("vocab_size", MAX_VOCAB),
        ("seq_len", MAX_SEQ_LEN),
        ("n_layer", MAX_LAYERS),
        ("n_head", MAX_HEADS),
        ("n_embd", MAX_EMBD),
        ("mlp_mult", MAX_MLP_MULT),
    ):
        _check_range(getattr(m, key), 1, high, f"model {key}")
    if m.n_embd % m.n_head:
        raise InputError(f"model n_embd {m.n_embd} is not a multiple of n_head {m.n_head}")
    _check_family(m)
    params = count_parameters(m)
    if params > MAX_PARAMS:
        raise InputError(f"model has {params} parameters, more than the {MAX_PARAMS} allowed")


def _check_optim(o: OptimConfig) -> None:
    _check_range(o.warmup_steps, 0, MAX_SCHEDULE_STEPS, "optim warmup_steps")
    _check_range(o.decay_steps, 1, MAX_SCHEDULE_STEPS, "optim decay_steps")
    if not (0.0 <= o.beta1 < 1.0 and 0.0 <= o.beta2 < 1.0):
        raise InputError(f"optim betas ({o.beta1}, {o.beta2}) must lie in [0, 1)")
    if not (0.0 <= o.lr <= 1.0 and 0.0 <= o.min_lr <= 1.0 and 0.0 < o.eps <= 1.0 and 0.0 <= o.weight_decay <= 1.0):
        raise InputError(
            f"optim lr {o.lr}, min_lr {o.min_lr}, weight_decay {o.weight_decay} must lie in [0, 1] "
            f"and eps {o.eps} in (0, 1]"
        )


def check_sizes(t: TrainConfig) -> None:
    """InputError unless every size of `t` is within the bounds above (cheap: nothing is allocated).

    The schedule calls this before it loops over micro-batches or draws windows,
    so a TrainConfig built directly (not through from_dict) is bounded too.
    """
    _check_model(t.model)
    _check_range(t.batch_size, 1, MAX_BATCH, "batch_size")
    _check_range(t.micro_batches, 1, MAX_MICRO_BATCHES, "micro_batches")
    if not _is_pow2(t.micro_batches):
        raise InputError(f"micro_batches is {t.micro_batches}, want a power of two")
    tokens = t.micro_batches * t.batch_size * t.model.seq_len
    if tokens > MAX_TOKENS_PER_STEP:
        raise InputError(
            f"a step reads micro_batches {t.micro_batches} x batch_size {t.batch_size} x seq_len "
            f"{t.model.seq_len} = {tokens} tokens, more than the {MAX_TOKENS_PER_STEP} allowed"
        )


def _check_train(t: TrainConfig) -> None:
    check_sizes(t)
    _check_optim(t.optim)
    if not 0 <= t.seed <= MAX_SEED:
        raise InputError(f"seed {t.seed} is outside [0, 2^64)")


TINY = ModelConfig(name="tiny", vocab_size=256, seq_len=64, n_layer=2, n_head=4, n_embd=64, mlp_mult=4, tied_head=True)
SMALL = ModelConfig(
    name="small", vocab_size=256, seq_len=256, n_layer=6, n_head=6, n_embd=384, mlp_mult=4, tied_head=True
)
# GPT-2 / Pythia family shapes on a 50,304-entry vocabulary (GPT-2's BPE padded to a multiple of 64).
GPT_VOCAB = 50304
GPT_125M = ModelConfig(
    name="125m", vocab_size=GPT_VOCAB, seq_len=1024, n_layer=12, n_head=12, n_embd=768, mlp_mult=4, tied_head=True
)  # GPT-2 small
GPT_350M = ModelConfig(
    name="350m", vocab_size=GPT_VOCAB, seq_len=1024, n_layer=24, n_head=16, n_embd=1024, mlp_mult=4, tied_head=True
)  # GPT-2 medium
GPT_1B = ModelConfig(
    name="1b", vocab_size=GPT_VOCAB, seq_len=2048, n_layer=16, n_head=8, n_embd=2048, mlp_mult=4, tied_head=False
)  # Pythia-1B (untied head)
# The Llama family: rotary positions (theta 10,000), grouped-query attention, SwiGLU, untied head.
TINY_LLAMA = ModelConfig(
    name="tiny-llama",
    vocab_size=256,
    seq_len=64,
    n_layer=2,
    n_head=4,
    n_embd=64,
    mlp_mult=4,
    tied_head=False,
    family="llama",
    rope_theta=10000.0,
    n_kv_head=2,
)
LLAMA_VOCAB = 32000  # Llama 1 and 2's SentencePiece vocabulary
LLAMA_125M = ModelConfig(
    name="llama-125m",
    vocab_size=LLAMA_VOCAB,
    seq_len=2048,
    n_layer=12,
    n_head=12,
    n_embd=768,
    mlp_mult=4,
    tied_head=False,
    family="llama",
    rope_theta=10000.0,
    n_kv_head=4,
)  # GPT-2 small's depth and width in Llama's architecture (SwiGLU width 2048)
CONFIGS: dict[str, ModelConfig] = {
    "tiny": TINY,
    "small": SMALL,
    "125m": GPT_125M,
    "350m": GPT_350M,
    "1b": GPT_1B,
    "tiny-llama": TINY_LLAMA,
    "llama-125m": LLAMA_125M,
}

# Per-model training defaults: (batch_size, micro_batches, lr, min_lr, warmup_steps, decay_steps).
# The GPT presets read 65,536 tokens per step by default.
_DEFAULTS = {
    "tiny": (4, 4, 3e-3, 3e-4, 10, 1000),
    "small": (4, 4, 1e-3, 1e-4, 100, 10000),
    "125m": (4, 16, 6e-4, 6e-5, 100, 10000),
    "350m": (2, 32, 3e-4, 3e-5, 100, 10000),
    "1b": (1, 32, 3e-4, 3e-5, 100, 10000),
    "tiny-llama": (4, 4, 3e-3, 3e-4, 10, 1000),
    "llama-125m": (2, 16, 6e-4, 6e-5, 100, 10000),
}


def check_preset_name(cfg: TrainConfig) -> None:
    """InputError if cfg's model carries a preset's name but not exactly that preset's shape."""
    preset = CONFIGS.get(cfg.model.name)
    if preset is not None and cfg.model != preset:
        raise InputError(f"config.model is named {cfg.model.name!r} but is not that preset's shape")


def train_config(
    name: str = "tiny", micro_batches: int | None = None, seed: int = 0, steps: int | None = None
) -> TrainConfig:
    """The named configuration; `steps` sets the schedule so lr reaches min_lr at the last step."""
    if name not in CONFIGS:
        raise InputError(f"unknown config {name!r}, want one of {', '.join(CONFIGS)}")
    batch_size, default_m, lr, min_lr, warmup, decay = _DEFAULTS[name]
    if steps is not None:
        if steps < 1:
            raise InputError(f"steps is {steps}, want >= 1")
        warmup = min(warmup, steps // 10)
        decay = max(1, steps - warmup)
    optim = OptimConfig(
        lr=lr,
        min_lr=min_lr,
        warmup_steps=warmup,
        decay_steps=decay,
        beta1=0.9,
        beta2=0.95,
        eps=1e-8,
        weight_decay=0.1,
    )
    cfg = TrainConfig(
        model=CONFIGS[name],
        optim=optim,
        batch_size=batch_size,
        micro_batches=default_m if micro_batches is None else micro_batches,
        seed=seed,
    )
    _check_train(cfg)
    return cfg
