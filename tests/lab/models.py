"""The lab-mode tests' tiny models: p2paudit/lab/sample_models.py (shipped: lab.warm trains them too)."""

from p2paudit.lab.sample_models import (
    Block,
    GPT2Block,
    RMSNorm,
    TinyGPT2,
    TinyLlama,
    batches,
    init_from_numpy,
    make,
    make_gpt2,
    rope,
    train_step,
)

__all__ = [
    "RMSNorm",
    "rope",
    "Block",
    "TinyLlama",
    "init_from_numpy",
    "GPT2Block",
    "TinyGPT2",
    "make_gpt2",
    "make",
    "batches",
    "train_step",
]
