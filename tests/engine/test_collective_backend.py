"""Which torch.distributed backend the workers join: NCCL only with a GPU per rank, else gloo."""

import pytest
import torch

from p2paudit.engine.distributed import collective_backend


@pytest.mark.parametrize(
    "cuda, gpus, rank, world, want",
    [
        (False, 0, 0, 2, ("gloo", "cpu")),
        (True, 1, 1, 2, ("gloo", "cpu")),  # two ranks cannot share one GPU under NCCL
        (True, 2, 1, 2, ("nccl", "cuda:1")),
        (True, 8, 3, 4, ("nccl", "cuda:3")),
    ],
)
def test_collective_backend(monkeypatch, cuda, gpus, rank, world, want):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert collective_backend(rank, world) == want
