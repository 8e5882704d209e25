"""Train tests/lab/models.TinyLlama two steps under the lab mode and under stock torch; print the digests as JSON.

Run in a fresh interpreter by tests/lab (instruction-set settings are read when torch and numba load):
`python tests/lab/lab_probe.py BACKEND ARITHMETIC`. Prints one JSON line: the canonical state digests
per step, stock torch's, and the settings the libraries actually applied.
"""

from __future__ import annotations

import json
import sys

import numba
import torch

from p2paudit.lab import LabRun
from p2paudit.tensor_digest import digest_state
from tests.lab import models

STEPS = 2


def stock_state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
    """The engine-style state of a stock-trained model (the same names LabRun digests)."""
    state = {}
    for name, p in model.named_parameters():
        state[f"params/{name}"] = p.detach().numpy().copy()
        st = opt.state[p]
        state[f"opt/m/{name}"] = st["exp_avg"].numpy().copy()
        state[f"opt/v/{name}"] = st["exp_avg_sq"].numpy().copy()
    return state


def main(backend: str, arithmetic: int) -> dict:
    data = models.batches(STEPS, b=4, t=32)
    model, opt = models.make(c=64, heads=4)
    run = LabRun(model, opt, backend=backend, arithmetic=arithmetic)
    for i, tokens in enumerate(data):
        with run.step(i):
            models.train_step(model, opt, tokens)
    stock_model, stock_opt = models.make(c=64, heads=4)
    stock = []
    for tokens in data:
        models.train_step(stock_model, stock_opt, tokens)
        stock.append(digest_state(stock_state(stock_model, stock_opt)).to_dict())
    return {
        "canonical": [r.state.to_dict() for r in run.records],
        "traces": [r.trace.hex() for r in run.records],
        "stock": stock,
        "settings": {
            "torch_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(),
            "numba_threads": numba.get_num_threads(),
            "numba_cpu_name": numba.config.CPU_NAME or "host",
        },
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
