"""Progress within one step: what the step core reports while it works, for people to watch.

A step of a `1b` run takes minutes to an hour on one machine, most of it in the
micro-batches' forward and backward passes. The step core calls an optional
`ProgressHook` as it goes:

- phase "micro-batch": after each layer of a micro-batch's forward and backward
  pass (`layers_done` of `layers`, counting forward and backward separately, so
  `layers` is 2 * n_layer) and once more when the micro-batch is finished
  (`micro_batches_done` counts finished micro-batches; that event has
  `layers_done` 0, the next micro-batch's count);
- phase "update": after each parameter's AdamW update (`params_done` of `params`).

A hook only watches: it must not raise and it cannot change a bit of the result.
`fraction()` weighs the update like one layer of one micro-batch (it is cheap);
consumers turn successive fractions into a rate and a time left. A driver that
runs many steps (replay, training, the daemon's auditor) fills in `step` with
`dataclasses.replace` before passing an event on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

PHASES = ("micro-batch", "update")


@dataclass(frozen=True)
class StepProgress:
    """Where the step core is within one step (all counts are of finished work)."""

    phase: str
    micro_batches_done: int
    micro_batches: int
    layers_done: int = 0  # within the current micro-batch; forward and backward both counted
    layers: int = 0
    params_done: int = 0
    params: int = 0
    step: int | None = None  # the step n of state_n -> state_n+1; the core leaves it None, a driver sets it

    def fraction(self) -> float:
        """The share of the step's work finished, in [0, 1]."""
        per_mb = max(self.layers, 1)
        total = self.micro_batches * per_mb + 1
        if self.phase == "update":
            return (self.micro_batches * per_mb + self.params_done / max(self.params, 1)) / total
        done = self.micro_batches_done * per_mb + min(self.layers_done, per_mb)
        return min(done, total) / total


ProgressHook = Callable[[StepProgress], None]
