"""Golden digests of tiny lab steps: the speed work on the lab mode (fused kernels, caches, the dispatch path)
must leave every bit where it was. Recorded from the unoptimised mode (commit 83391b6's op table 1).

Each case trains two steps and pins, per step, the state digest, the dataflow-trace digest, and one SHA-256
over the value trace (every op's output digest, in order: the attention's log-sum-exp output included).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from p2paudit.lab import LabRun
from tests.lab import models

CASES = {  # name -> (model factory, batch shape (B, T), vocabulary): T past the kernels' tiles, V past 1024
    "llama": (lambda: models.make(), (2, 8), 64),
    "llama-gqa-t12": (lambda: models.make(heads=4, kv_heads=2), (2, 12), 64),
    "gpt2-t12": (lambda: models.make_gpt2(), (2, 12), 64),
    "llama-v2000-t40": (lambda: models.make(vocab=2000), (1, 40), 2000),
}


def fingerprints(case: str, backend: str, arithmetic: int) -> list[tuple[str, str, str]]:
    """(state, trace, values) hex digests of each of two steps of `case`."""
    factory, (b, t), vocab = CASES[case]
    model, opt = factory()
    run = LabRun(model, opt, backend=backend, arithmetic=arithmetic, values=True)
    for i, tokens in enumerate(models.batches(2, b=b, t=t, vocab=vocab)):
        with run.step(i):
            models.train_step(model, opt, tokens)
    out = []
    for r in run.records:
        h = hashlib.sha256()
        for name, d in r.values or ():
            h.update(name.encode() + b"\0" + d)
        out.append((r.state.text(), r.trace.hex(), h.hexdigest()))
    return out


GOLDEN: dict[tuple[str, int], list[tuple[str, str, str]]] = {
    ("gpt2-t12", 1): [
        (
            "sha256:a4736fb8bfde4efef47af64aa53476c143f604511ef6d4b3774de3cc656e822d",
            "df725305468a95b7bddd189ce122e1014ef03fe7d1e74bb3b55bbd5b08521321",
            "8d12356e585134f60f6031a1430738c7afaece5e9a584da1b6672fa468242d67",
        ),
        (
            "sha256:2f469a63040bb6b782c2c3d1163192f7cfabcffd4d0e66bf42f222e0b4293380",
            "c15e1a5925a90705257f047b588a07af1fbb4ae270b79ab5bb2f09e15798f05f",
            "fc24a88d1de621cb6f44363ccb6950747811e3533618d0cd31c7dc3fb577066a",
        ),
    ],
    ("gpt2-t12", 2): [
        (
            "sha256:ed5e28fd03ac65553aeede3e0653b27b32f7dab8d38f8a3f304f1e8f1885d67a",
            "df725305468a95b7bddd189ce122e1014ef03fe7d1e74bb3b55bbd5b08521321",
            "2f7bad096687d4aef18270111ecdf2c5a07c845ae440feba78701bb9a0c77ae3",
        ),
        (
            "sha256:6a20aa9829706b486b952b4e3a151201b15a129a6767cf8c018a2a3f027394a4",
            "c15e1a5925a90705257f047b588a07af1fbb4ae270b79ab5bb2f09e15798f05f",
            "4fc307eab8195f8428b34b51b32b03711ebe793a42eb5bca17762bb626355126",
        ),
    ],
    ("llama", 1): [
        (
            "sha256:9a3f7cda7bb163abf8f45cdd194978df4dff2ac47776a442585b628e9357983e",
            "99dae38efca12d69759715fd25072462e77065658f631f60671e91e68118595c",
            "ccccdbfca2a094ac266449e99128ca0ac668df9595bc15e233c9f7b03581e4d4",
        ),
        (
            "sha256:9f26f8568bf3a72d4646a733d54dc9208e87206d70ef4c14818dd182fb0ae779",
            "8556dae1674ae62b0d45e3e6e938f67b13fab082e2881c0373e22b054e6596f8",
            "0607a3fc792b6ae6ff4a602c01b30a36882642a933e6e4472a1760e227ddd14e",
        ),
    ],
    ("llama", 2): [
        (
            "sha256:9d536a372af9fb8adf816f227a9ba0b616ccb59748f572fda2028b46d739ebdf",
            "99dae38efca12d69759715fd25072462e77065658f631f60671e91e68118595c",
            "3fb78e1db95b3fa80d089a5bdbb2136054eb89ab2d40ab678da1d50bd1fc0042",
        ),
        (
            "sha256:56fa043135013eed9d948b4b971d6289832a24d019029cacc1668c45a613a516",
            "8556dae1674ae62b0d45e3e6e938f67b13fab082e2881c0373e22b054e6596f8",
            "7d3f2425bb5a85a266d11618ecad67d09ba896fb4e0e8bbe0c23cbc136b98b92",
        ),
    ],
    ("llama-gqa-t12", 1): [
        (
            "sha256:477ceca7f7c511edd165cd046e2ddee64fffc16cee8ca9a14afa302df943d329",
            "8812fe64f3c4684d790ddd2bbb110db1c421cdda433ba98dd32ff9bcaf2f3c9e",
            "65dd93ef865d637e886a449d3c967130d2f032ab9500351fa7861ac726afd321",
        ),
        (
            "sha256:af46b35537ad5c3655156c75b4e53c239b1e949fc24c57a8339c52dce4efe0cb",
            "684d40fffb724cec33cad1197b5a4895583f7165841f94c4780167e3349e9aba",
            "4dda09ce79ba03ab89918ff58fb2a52ff03d5fecec1cecbb3f0c3b4288b077c4",
        ),
    ],
    ("llama-gqa-t12", 2): [
        (
            "sha256:e52915801df5fdbfee9ea66ace69a11a6b5ccdc686b698c1b91136d752e53bc3",
            "8812fe64f3c4684d790ddd2bbb110db1c421cdda433ba98dd32ff9bcaf2f3c9e",
            "638016b8d5b31ab5c52b19039d471f01d3aa15677637441d169b10985bb9b818",
        ),
        (
            "sha256:a3562e4c8458f184120244ae5edb316109f4fbaf686b3024d02141b47382051f",
            "684d40fffb724cec33cad1197b5a4895583f7165841f94c4780167e3349e9aba",
            "df55b45708b5859a3bf36b48df6b262cbe9a366586b343bd132e699dd75768e2",
        ),
    ],
    ("llama-v2000-t40", 1): [
        (
            "sha256:988652651b74dc54c301a979a4afe34e9b61cd7adb3715afdfab4362dbf5cf09",
            "35b9860a5502ac69b63b4306b610fbe44da473ac822239755e17b8c425a3a0c3",
            "25f25093d913c9f2c3470e1dda4d4665d1d2586021faa7af983b1f854ef2b727",
        ),
        (
            "sha256:7dc249a50ab50825d2348e35d7143552c6bba5f17925597dca4118ab64a9339f",
            "0aae4f3d48a71c27cc7b2649173aa9494910a2119daf55925c58209771d20a37",
            "b0ba96c744f806afc0772601f9e99c8b32f2ceb386402a1642c4175b670c26a7",
        ),
    ],
    ("llama-v2000-t40", 2): [
        (
            "sha256:857542d89d68a7d6afe3a83f995bcd4823c7dcf9c3b55af2abeed28669209c97",
            "35b9860a5502ac69b63b4306b610fbe44da473ac822239755e17b8c425a3a0c3",
            "3e55b0d4df6c4a39b83f7dea570ebabcbb245cee27229adb1e4bd6f0ca488ce4",
        ),
        (
            "sha256:034cacaaec02fde80afde5b9f3aec2305912c399ff7b1c60864f1dcbd7115abd",
            "0aae4f3d48a71c27cc7b2649173aa9494910a2119daf55925c58209771d20a37",
            "77e28fd5173db63481856881ade80f4f0b08a7d71a187dbe645be9afdea63a69",
        ),
    ],
}


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("arithmetic", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_lab_steps_keep_their_golden_digests(case: str, arithmetic: int, backend: str) -> None:
    torch.manual_seed(0)
    assert fingerprints(case, backend, arithmetic) == GOLDEN[(case, arithmetic)]


def test_the_state_is_digested_from_views_and_kept_as_copies() -> None:
    model, opt = models.make()
    run = LabRun(model, opt, backend="cpu")
    weight = model.head.weight.detach().numpy()
    assert np.shares_memory(run.state_arrays(copy=False)["params/head.weight"], weight)  # no copy to hash
    assert not np.shares_memory(run.state_arrays()["params/head.weight"], weight)  # what a caller keeps
