"""Make every stock CPU kernel of op table 1's entries raise, then train under the lab mode: nothing leaks.

`python tests/lab/leak_probe.py`: registers, through torch.library, a CPU kernel that raises for every
TABLE operation (aten.mm, aten.add.Tensor, aten._fused_adamw_, ...); checks that a stock step now fails
(the overrides are in force); then trains two canonical steps and prints one JSON line with their digests.
"""

from __future__ import annotations

import json
import warnings

import torch

from p2paudit.lab import LabRun
from p2paudit.lab.table import TABLE
from tests.lab import models


class StockKernelRan(RuntimeError):
    pass


def raiser(name: str):  # noqa: ANN201
    def kernel(*args: object, **kwargs: object) -> None:
        raise StockKernelRan(f"the stock kernel of {name} ran")

    return kernel


def override_table() -> tuple[torch.library.Library, list[str]]:
    lib = torch.library.Library("aten", "IMPL")
    names = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel": that is the point
        for name in TABLE:
            op = name.removeprefix("aten.")
            op = op.removesuffix(".default")
            lib.impl(op, raiser(name), "CPU")
            names.append(name)
    return lib, names


def main() -> dict:
    data = models.batches(2, b=2, t=16)
    model, opt = models.make(c=32, heads=4)
    stock_model, stock_opt = models.make(c=32, heads=4)
    lib, names = override_table()
    try:
        models.train_step(stock_model, stock_opt, data[0])
        stock_failed = ""
    except StockKernelRan as e:
        stock_failed = str(e)
    run = LabRun(model, opt, backend="cpu")
    for i, tokens in enumerate(data):
        with run.step(i):
            models.train_step(model, opt, tokens)
    del lib
    return {"overridden": len(names), "stock_failed": stock_failed, "digests": [r.state.text() for r in run.records]}


if __name__ == "__main__":
    print(json.dumps(main()))
