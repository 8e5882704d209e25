"""The Llama family of the built-in engine: rotary positions, grouped-query attention, SwiGLU.

Three kinds of check, as for the gpt family:
- the function: the engine's gradients against torch autograd in float64 on a
  model written again below, independently of the engine (RoPE in halves with
  float64 angles, k/v heads repeated with repeat_interleave, SwiGLU), and a
  wrong model (no rotation) failing the same tolerance;
- the bits: reference and cpu give equal step digests in both arithmetic
  versions, which differ from each other; the streamed step gives train_step's
  tensors; the Triton backend (interpreted, slow) gives the reference's;
  8 steps of the tiny-llama preset reach the committed golden digests;
- the config: a gpt config's dict has none of llama's keys, a llama one has
  all three, and every inconsistent combination is refused in one line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from engine_helpers import assert_grads_close, text_corpus
from test_grads import perturbed_state, rms

import kernels
from p2paudit.engine.config import ModelConfig, TrainConfig, count_parameters, train_config
from p2paudit.engine.rope import rope_tables
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state, param_shapes
from p2paudit.engine.step import micro_batch_grads, train_step
from p2paudit.engine.streaming import MemoryGradStore, streamed_step
from p2paudit.errors import InputError
from p2paudit.run.digest import digest_bytes, digest_state
from p2paudit.run.golden import GOLDEN_TINY_LLAMA_DIGESTS, GOLDEN_TINY_STEPS
from p2paudit.run.shards import corpus_tokens

REL_TOL = 1e-4


def llama_config(micro_batches: int = 2, seq_len: int = 16, n_kv_head: int = 2, n_layer: int = 2) -> TrainConfig:
    """The tiny-llama preset with a shorter context and batch, so multi-backend tests stay quick."""
    cfg = train_config("tiny-llama", micro_batches=micro_batches, seed=7, steps=20)
    model = dataclasses.replace(
        cfg.model, name="tiny-llama-test", seq_len=seq_len, n_kv_head=n_kv_head, n_layer=n_layer
    )
    return dataclasses.replace(cfg, model=model, batch_size=2)


# ------------------------------------------------------------------ the function, in float64


def rotate(x: torch.Tensor, theta: float, rotary: bool = True) -> torch.Tensor:
    """RoPE on (B, H, T, D) in halves: y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin, angle t * theta^(-2i/D)."""
    if not rotary:
        return x
    T, D = x.shape[-2], x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    c, s = angle.cos(), angle.sin()
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def llama_loss(p: dict[str, torch.Tensor], tokens: torch.Tensor, model: ModelConfig, rotary: bool = True):
    """A Llama-style decoder in float64 torch: no wpe, rotated q and k, grouped k/v heads, SwiGLU, untied head."""
    B, T, H, KV, C = tokens.shape[0], model.seq_len, model.n_head, model.n_kv_head, model.n_embd
    D = C // H
    idx, tgt = tokens[:, :-1], tokens[:, 1:]
    x = p["wte"][idx]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for layer in range(model.n_layer):
        w = {k[len(f"h.{layer}.") :]: v for k, v in p.items() if k.startswith(f"h.{layer}.")}
        a = rms(x, w["ln1"])
        q = (a @ w["attn.wq"]).view(B, T, H, D).transpose(1, 2)
        k = (a @ w["attn.wk"]).view(B, T, KV, D).transpose(1, 2)
        v = (a @ w["attn.wv"]).view(B, T, KV, D).transpose(1, 2)
        q, k = rotate(q, model.rope_theta, rotary), rotate(k, model.rope_theta, rotary)
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        att = ((q @ k.transpose(-1, -2)) / D**0.5).masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, C) @ w["attn.wo"]
        a2 = rms(x, w["ln2"])
        x = x + (torch.nn.functional.silu(a2 @ w["mlp.w_gate"]) * (a2 @ w["mlp.w_up"])) @ w["mlp.w_proj"]
    head = p["wte"] if model.tied_head else p["lm_head"]
    logits = rms(x, p["ln_f"]) @ head.T
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1))


def float64_grads(state, tokens, model, rotary: bool = True):
    p = {n: torch.tensor(state["params/" + n], dtype=torch.float64, requires_grad=True) for n in param_shapes(model)}
    loss = llama_loss(p, torch.from_numpy(tokens), model, rotary)
    loss.backward()
    return {n: t.grad.numpy() for n, t in p.items()}, loss.item()


def worst_relative_error(ours, want) -> tuple[str, float]:
    errs = {n: float(np.abs(ours[n].astype(np.float64) - g).max() / (np.abs(g).max() + 1e-30)) for n, g in want.items()}
    name = max(errs, key=errs.__getitem__)
    return name, errs[name]


@pytest.mark.parametrize("n_kv_head", [1, 2, 4])  # multi-query, grouped, and plain multi-head
@pytest.mark.parametrize("arithmetic", [1, 2])
def test_llama_gradients_match_float64_autograd(n_kv_head, arithmetic):
    cfg = llama_config(micro_batches=1, n_kv_head=n_kv_head)
    state = perturbed_state(cfg)
    tokens = batch_for_step(text_corpus(), b"grad-test", cfg, 0)[0]
    ours, loss = micro_batch_grads(state, tokens, cfg, kernels.get_backend("reference", arithmetic))
    want, want_loss = float64_grads(state, tokens, cfg.model)
    assert list(ours) == list(want) and "wpe" not in ours
    assert abs(float(loss) - want_loss) <= 1e-5 * want_loss
    assert_grads_close(ours, want, REL_TOL)


def test_the_float64_comparison_fails_without_the_rotation():
    cfg = llama_config(micro_batches=1)
    state = perturbed_state(cfg)
    tokens = batch_for_step(text_corpus(), b"grad-test", cfg, 0)[0]
    ours, _ = micro_batch_grads(state, tokens, cfg, kernels.get_backend("reference"))
    unrotated, _ = float64_grads(state, tokens, cfg.model, rotary=False)
    rotated = {n: g for n, g in unrotated.items() if "attn.wq" in n or "attn.wk" in n}
    name, err = worst_relative_error(ours, rotated)
    assert err > 100 * REL_TOL, f"{name}: {err:.3g}"


def test_rope_tables_are_the_rotation_angles_to_float32_accuracy():
    model = train_config("tiny-llama").model
    cos, sin, sin_neg = rope_tables(model)
    T, D = model.seq_len, model.head_dim
    assert cos.shape == sin.shape == (T, D // 2) and cos.dtype == np.float32
    assert np.array_equal(sin_neg.view(np.uint32), np.negative(sin).view(np.uint32))
    inv = model.rope_theta ** (-np.arange(D // 2, dtype=np.float64) * 2 / D)
    angle = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    # the float32 angle t * f_i is within about t ulp(1) of the exact one; the functions add about 1e-7
    bound = 4e-7 * np.maximum(1.0, angle)
    assert np.all(np.abs(cos - np.cos(angle)) <= bound) and np.all(np.abs(sin - np.sin(angle)) <= bound)
    assert not cos.flags.writeable


def test_the_table_cache_is_bounded():
    from p2paudit.engine import rope

    base = train_config("tiny-llama").model
    for theta in (2.0, 3.0, 5.0, 7.0, 11.0, 13.0):
        rope_tables(dataclasses.replace(base, rope_theta=theta))
    assert rope._tables.cache_info().currsize <= rope.TABLE_CACHE_SIZE


def test_rope_is_a_rotation_and_its_backward_its_inverse():
    rng = np.random.default_rng(3)
    model = train_config("tiny-llama").model
    cos, sin, sin_neg = rope_tables(model)
    x = rng.standard_normal((3, model.seq_len, model.head_dim)).astype(np.float32)
    be = kernels.get_backend("reference")
    y = be.rope(x, cos, sin)
    h = model.head_dim // 2
    exact = np.concatenate(
        [
            x[..., :h].astype(np.float64) * cos - x[..., h:] * sin,
            x[..., h:].astype(np.float64) * cos + x[..., :h] * sin,
        ],
        axis=-1,
    )
    assert np.abs(y - exact).max() <= 2 * np.finfo(np.float32).eps * np.abs(x).max()
    norms = np.hypot(x[..., :h].astype(np.float64), x[..., h:]), np.hypot(y[..., :h].astype(np.float64), y[..., h:])
    assert np.allclose(*norms, rtol=1e-6)
    assert np.allclose(be.rope(y, cos, sin_neg), x, rtol=0, atol=1e-5)


def test_head_group_sum_is_a_left_fold_and_repeat_an_exact_copy():
    be = kernels.get_backend("reference")
    x = np.zeros((3, 1, 1), np.float32)
    x[:, 0, 0] = [1.0, 1e8, -1e8]  # ((1 + 1e8) + -1e8) = 0 in float32
    assert be.sum_head_groups(x, 3)[0, 0, 0] == 0.0
    assert np.float32(1.0) + (np.float32(1e8) + np.float32(-1e8)) == 1.0  # the other order gives 1
    rng = np.random.default_rng(4)
    kv = rng.standard_normal((4, 5, 6)).astype(np.float32)
    rep = be.repeat_heads(kv, 3)
    assert rep.shape == (12, 5, 6) and all(np.array_equal(rep[j * 3 + g], kv[j]) for j in range(4) for g in range(3))
    assert np.array_equal(be.sum_head_groups(rep, 3), (kv + kv) + kv)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda be: be.rope(np.zeros((2, 4, 5), np.float32), *[np.zeros((4, 2), np.float32)] * 2), "odd last dim"),
        (lambda be: be.rope(np.zeros((2, 4, 6), np.float32), *[np.zeros((4, 2), np.float32)] * 2), "want \\(4, 3\\)"),
        (lambda be: be.rope(np.zeros((2, 4, 6)), *[np.zeros((4, 3), np.float32)] * 2), "float32"),
        (lambda be: be.sum_head_groups(np.zeros((5, 2, 2), np.float32), 2), "not a multiple of groups 2"),
        (lambda be: be.repeat_heads(np.zeros((5, 2, 2), np.float32), 0), "groups"),
        (lambda be: be.mul(np.zeros(3, np.float32), np.zeros(4, np.float32)), "shape"),
    ],
)
@pytest.mark.parametrize("backend_name", ["reference", "cpu"])
def test_the_llama_kernels_name_bad_input(backend_name, call, message):
    with pytest.raises(kernels.KernelInputError, match=message):
        call(kernels.get_backend(backend_name))


# ------------------------------------------------------------------ the bits


def two_steps(cfg: TrainConfig, backend) -> dict[str, np.ndarray]:
    state = init_state(cfg)
    for n in range(2):
        state = train_step(state, batch_for_step(text_corpus(), b"llama-test", cfg, n), cfg, backend).state
    return state


def test_reference_and_cpu_steps_are_bitwise_equal_and_the_versions_differ():
    cfg = llama_config()
    digests = {}
    for arithmetic in (1, 2):
        ref, cpu = (digest_state(two_steps(cfg, kernels.get_backend(b, arithmetic))) for b in ("reference", "cpu"))
        assert ref == cpu, f"arithmetic {arithmetic}: reference {ref.text()} cpu {cpu.text()}"
        digests[arithmetic] = ref
    assert digests[1] != digests[2]


def test_the_streamed_step_gives_train_steps_tensors():
    cfg = llama_config(micro_batches=4)
    backend = kernels.get_backend("cpu")
    state = init_state(cfg)
    batch = batch_for_step(text_corpus(), b"llama-test", cfg, 0)
    want = train_step(state, batch, cfg, backend).state
    params = {k: v for k, v in state.items() if k.startswith("params/")}
    out: dict[str, np.ndarray] = {}
    moments = lambda n: (state["opt/m/" + n], state["opt/v/" + n])  # noqa: E731
    streamed_step(params, 0, moments, batch, out.__setitem__, cfg, backend, MemoryGradStore())
    differ = [k for k in want if k != "step" and out[k].tobytes() != want[k].tobytes()]
    assert not differ, f"{len(differ)} tensors differ, first {differ[:1]}"


@pytest.mark.parametrize("arithmetic", [1, 2])
def test_tiny_llama_reaches_its_golden_digest(arithmetic):
    cfg = train_config("tiny-llama", steps=GOLDEN_TINY_STEPS, seed=0)
    tokens = corpus_tokens()
    data_key = digest_bytes(tokens.tobytes())
    backend = kernels.get_backend("cpu", arithmetic)
    state = init_state(cfg)
    for n in range(GOLDEN_TINY_STEPS):
        state = train_step(state, batch_for_step(tokens, data_key, cfg, n), cfg, backend).state
    assert digest_state(state).text() == GOLDEN_TINY_LLAMA_DIGESTS[arithmetic]
    assert GOLDEN_TINY_LLAMA_DIGESTS[1] != GOLDEN_TINY_LLAMA_DIGESTS[2]


TRITON_SCRIPT = r"""
import hashlib, json, sys
import numpy as np
import kernels
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step
cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
tokens = np.frombuffer(open(sys.argv[2], "rb").read(), dtype=np.uint8)
out = {}
for arithmetic in (1, 2):
    state = train_step(init_state(cfg), batch_for_step(tokens, b"llama-test", cfg, 0), cfg,
                       kernels.get_backend("triton", arithmetic)).state
    out[arithmetic] = {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in state.items()}
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.triton
def test_interpreted_triton_llama_step_is_the_reference_in_both_versions(tmp_path):
    cfg = llama_config(micro_batches=2, seq_len=8, n_layer=1)
    cfg = dataclasses.replace(cfg, batch_size=1)
    corpus = tmp_path / "corpus.bin"
    corpus.write_bytes(text_corpus().tobytes())
    out = subprocess.run(
        [sys.executable, "-c", TRITON_SCRIPT, json.dumps(cfg.to_dict()), str(corpus)],
        capture_output=True, text=True, timeout=900, env=dict(os.environ, TRITON_INTERPRET="1"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    batch = batch_for_step(text_corpus(), b"llama-test", cfg, 0)
    for arithmetic in (1, 2):
        want = train_step(init_state(cfg), batch, cfg, kernels.get_backend("reference", arithmetic)).state
        want_hex = {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in want.items()}
        differ = [k for k in want_hex if got[str(arithmetic)].get(k) != want_hex[k]]
        assert not differ, f"arithmetic {arithmetic}: {len(differ)} tensors differ, first {differ[:1]}"


# ------------------------------------------------------------------ the config


def test_a_gpt_config_has_none_of_llamas_keys_and_a_llama_config_all():
    gpt, llama = train_config("tiny").model, train_config("tiny-llama").model
    assert set(gpt.to_dict()) == {
        "name",
        "vocab_size",
        "seq_len",
        "n_layer",
        "n_head",
        "n_embd",
        "mlp_mult",
        "tied_head",
    }
    d = llama.to_dict()
    assert (d["family"], d["rope_theta"], d["n_kv_head"]) == ("llama", 10000.0, 2)
    assert ModelConfig.from_dict(d) == llama and ModelConfig.from_dict(gpt.to_dict()) == gpt


@pytest.mark.parametrize("name", ["tiny-llama", "llama-125m"])
def test_the_parameter_count_is_the_states(name):
    model = train_config(name).model
    assert count_parameters(model) == sum(int(np.prod(s)) for s in param_shapes(model).values())
    assert "wpe" not in param_shapes(model) and param_shapes(model)["h.0.attn.wk"] == (
        model.n_embd,
        model.n_kv_head * model.head_dim,
    )
    assert model.mlp_hidden % 256 == 0


def test_the_presets_shapes():
    assert count_parameters(train_config("tiny-llama").model) == 155_968
    assert train_config("llama-125m").model.mlp_hidden == 2048  # 2/3 of 4 x 768, a multiple of 256


def _model(**changes) -> dict:
    d = train_config("tiny-llama").model.to_dict()
    d.update(changes)
    return {k: v for k, v in d.items() if v is not None}


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (_model(family="gpt"), 'family "gpt" is written by omitting'),
        (_model(family="mamba"), "is not one of gpt, llama"),
        (_model(family=None), "model key rope_theta needs family"),
        (_model(n_kv_head=3), "n_head 4 is not a multiple of n_kv_head 3"),
        (_model(n_kv_head=0), "n_kv_head"),
        (_model(n_kv_head=8), "n_kv_head"),
        (_model(rope_theta=1.0), "rope_theta is 1.0"),
        (_model(rope_theta=1e10), "rope_theta"),
        (_model(n_head=2, n_embd=6, n_kv_head=1), "head size 3 .* is odd"),
        (_model(rope_theta=None), "lacks key"),
        ({**train_config("tiny").model.to_dict(), "n_kv_head": 2}, "model key n_kv_head needs family"),
    ],
)
def test_an_inconsistent_model_is_refused_in_one_line(model, message):
    with pytest.raises(InputError, match=message) as caught:
        ModelConfig.from_dict(model)
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------ published and verified like any run


@pytest.mark.slow  # about 15 s: two runs published, seven checks
def test_a_published_llama_run_verifies_and_a_changed_initial_state_is_caught(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from p2paudit.audit.replay import StepRange, open_run, verify_range
    from p2paudit.cli import cli
    from p2paudit.identity import identity_from_seed
    from p2paudit.run import publisher as publisher_module
    from p2paudit.run.publisher import TrainPlan, publish_run

    publisher = identity_from_seed(b"\x22" * 32)
    publish_run(TrainPlan(tmp_path / "honest", "tiny-llama", steps=3, ckpt_every=1, backend="cpu"), publisher)
    result = CliRunner().invoke(
        cli, ["verify-range", "0-2", "--run", str(tmp_path / "honest"), "--json"], env={"P2PAUDIT_HOME": str(tmp_path)}
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert (summary["steps"], summary["match"]) == (4, 4)  # init and steps 0, 1, 2

    def backdoored(cfg: TrainConfig) -> dict[str, np.ndarray]:
        state = init_state(cfg)
        wk = state["params/h.0.attn.wk"].copy()
        wk[0, 0] = np.float32(0.5)  # one key weight changed, the rest the recipe's
        return dict(state, **{"params/h.0.attn.wk": wk})

    monkeypatch.setattr(publisher_module, "init_state", backdoored)
    publish_run(TrainPlan(tmp_path / "forged", "tiny-llama", steps=3, ckpt_every=1, backend="cpu"), publisher)
    report = verify_range(open_run(tmp_path / "forged"), StepRange(True, 0, 2), "reference", diagnose=False)
    init, *steps = report.audits
    assert (init.verdict, init.findings) == ("mismatch", ("init",))
    assert [a.verdict for a in steps] == ["match"] * 3  # every step an honest function of the claimed state 0
