"""Model, optimiser and training configurations: frozen records with exact JSON round trips.

A `TrainConfig` is everything besides the data that decides a step's bits: the
model shape, the optimiser constants, the batch geometry and the run seed. The
run manifest stores `TrainConfig.to_dict()`; `TrainConfig.from_dict` checks
every key and type, so a malformed manifest fails with a one-line InputError.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from p2paudit.errors import InputError

MAX_SEED = 2**64 - 1


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer; n_embd must divide by n_head."""

    name: str
    vocab_size: int
    seq_len: int
    n_layer: int
    n_head: int
    n_embd: int
    mlp_mult: int
    tied_head: bool

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> ModelConfig:
        cfg = cls(**_check_fields(cls, d, "model"))
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


def _check_fields(cls: type, d: Any, what: str) -> dict[str, Any]:
    """Check that `d` is a dict with exactly cls's fields, each of its declared plain type."""
    if not isinstance(d, dict):
        raise InputError(f"{what} is a {type(d).__name__}, want an object")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(d) - set(names))
    missing = [n for n in names if n not in d]
    if unknown:
        raise InputError(f"{what} has unknown key(s) {', '.join(map(str, unknown))}")
    if missing:
        raise InputError(f"{what} lacks key(s) {', '.join(missing)}")
    out = {}
    for f in dataclasses.fields(cls):
        want = _TYPES.get(str(f.type))
        value = d[f.name]
        if want is not None:
            value = _check_type(value, want, f"{what} key {f.name}")
        out[f.name] = value
    return out


def _check_type(value: Any, want: type, where: str) -> Any:
    # bool is a subclass of int: reject it where an int or float is wanted.
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and want is not bool:
        raise InputError(f"{where} is a bool, want {want.__name__}")
    if not isinstance(value, want):
        raise InputError(f"{where} is a {type(value).__name__}, want {want.__name__}")
    return value


def _is_pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def _check_model(m: ModelConfig) -> None:
    for key in ("vocab_size", "seq_len", "n_layer", "n_head", "n_embd", "mlp_mult"):
        if getattr(m, key) < 1:
            raise InputError(f"model {key} is {getattr(m, key)}, want >= 1")
    if m.n_embd % m.n_head:
        raise InputError(f"model n_embd {m.n_embd} is not a multiple of n_head {m.n_head}")
    if m.vocab_size > 2**24 or m.seq_len > 2**24:
        raise InputError(f"model vocab_size {m.vocab_size} or seq_len {m.seq_len} exceeds 2^24")


def _check_optim(o: OptimConfig) -> None:
    if o.warmup_steps < 0 or o.decay_steps < 1:
        raise InputError(f"optim warmup_steps {o.warmup_steps} must be >= 0 and decay_steps {o.decay_steps} >= 1")
    if not (0.0 <= o.beta1 < 1.0 and 0.0 <= o.beta2 < 1.0):
        raise InputError(f"optim betas ({o.beta1}, {o.beta2}) must lie in [0, 1)")
    if not (o.lr >= 0.0 and o.min_lr >= 0.0 and o.eps > 0.0 and o.weight_decay >= 0.0):
        raise InputError("optim lr, min_lr, weight_decay must be >= 0 and eps > 0")


def _check_train(t: TrainConfig) -> None:
    if t.batch_size < 1:
        raise InputError(f"batch_size is {t.batch_size}, want >= 1")
    if not _is_pow2(t.micro_batches):
        raise InputError(f"micro_batches is {t.micro_batches}, want a power of two")
    if not 0 <= t.seed <= MAX_SEED:
        raise InputError(f"seed {t.seed} is outside [0, 2^64)")


TINY = ModelConfig(name="tiny", vocab_size=256, seq_len=64, n_layer=2, n_head=4, n_embd=64, mlp_mult=4, tied_head=True)
SMALL = ModelConfig(
    name="small", vocab_size=256, seq_len=256, n_layer=6, n_head=6, n_embd=384, mlp_mult=4, tied_head=True
)
CONFIGS: dict[str, ModelConfig] = {"tiny": TINY, "small": SMALL}

# Per-model training defaults: (batch_size, micro_batches, lr, min_lr, warmup_steps, decay_steps).
_DEFAULTS = {"tiny": (4, 4, 3e-3, 3e-4, 10, 1000), "small": (4, 4, 1e-3, 1e-4, 100, 10000)}


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
