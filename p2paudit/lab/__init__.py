"""Bring your own model: a lab's PyTorch training loop under a strict canonical dispatch mode (issue 22).

The second tier of DESIGN.md's "Two tiers of models": every aten op that a
step of the lab's own nn.Module and torch.optim.AdamW(fused=True) sends to
torch's dispatcher is computed by op table 1 (p2paudit.lab.table, defined
in docs/arithmetic.md section 8) on the canonical kernels, or refused by
name. A replay needs the same torch build (which ops reach dispatch is
torch's choice); within it, the state digest after each step is the same
on any CPU, thread count or instruction set.

This package stands at the engine's level: it imports kernels, the error
tree, the tensor digest format and torch, nothing above.
"""

from __future__ import annotations

from p2paudit.lab.mode import CanonicalMode
from p2paudit.lab.refusal import OP_TABLE_VERSION, LabOpRefused
from p2paudit.lab.script import (
    LabClaims,
    LabScript,
    ReplayVerdict,
    TorchBuildMismatch,
    check_script_bytes,
    judge_replay,
    load_script,
    load_state,
    torch_build,
    train_script,
)
from p2paudit.lab.session import LabRun, StepRecord
from p2paudit.lab.trace import first_departure, first_value_departure

__all__ = [
    "OP_TABLE_VERSION",
    "CanonicalMode",
    "LabClaims",
    "LabOpRefused",
    "LabRun",
    "LabScript",
    "ReplayVerdict",
    "StepRecord",
    "TorchBuildMismatch",
    "check_script_bytes",
    "first_departure",
    "first_value_departure",
    "judge_replay",
    "load_script",
    "load_state",
    "torch_build",
    "train_script",
]
