"""digest_state with the SHA-256 lanes (kernels/cpu_sha256.py): the same digests as without, every tensor.

The state holds what the format digests differently (NaN of either width written canonically, a
float64 tensor, big-endian and strided arrays, a 0-d step, empty tensors) beside many tensors of
a few sizes, so that some go through the lanes and the largest through hashlib; the lanes are
wrapped to show which did.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from kernels.cpu_sha256 import sha256_lanes
from p2paudit import tensor_digest
from p2paudit.tensor_digest import digest_state, digest_tensor


def _state() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    state: dict[str, np.ndarray] = {}
    for i in range(40):
        state[f"params/layer{i}.w"] = rng.standard_normal((64, 33 + i)).astype(np.float32)
        state[f"opt/m/layer{i}.w"] = rng.standard_normal(200 + 7 * i).astype(np.float32)
    state["params/embedding"] = rng.standard_normal((2048, 256)).astype(np.float32)  # far larger: hashlib's
    state["params/layer3.w"][5, 7] = np.float32(np.nan)  # a quiet NaN
    state["opt/m/layer9.w"][0] = np.frombuffer(b"\x01\x00\x80\xff", np.float32)[0]  # a signalling one
    state["opt/v/double"] = rng.standard_normal(999)  # float64
    state["opt/v/double"][3] = np.nan
    state["opt/v/big_endian"] = rng.standard_normal(300).astype(">f4")
    state["opt/v/strided"] = rng.standard_normal((50, 40)).astype(np.float32)[:, ::3]
    state["opt/v/empty"] = np.empty((0, 5), np.float32)
    state["opt/v/ints"] = rng.integers(-(2**40), 2**40, 513)
    state["opt/v/mask"] = rng.integers(0, 2, 77).astype(bool)
    state["step"] = np.array(7, np.int64)
    return state


def test_the_lanes_give_every_tensor_digest_that_hashlib_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensor_digest, "PARALLEL_HASH_BYTES", 1)  # a small state on every processor too
    monkeypatch.setattr(tensor_digest, "LANE_MIN_BYTES", 0)  # and its small tensors through the lanes
    monkeypatch.setattr(tensor_digest, "_hash_threads", lambda: 2)  # the lanes' share as on two processors
    state = _state()
    seen: list[str] = []

    def lanes(prefixes: list[bytes], datas: list[np.ndarray], checks: list[bool]):  # noqa: ANN202
        seen.extend(
            p[len(tensor_digest.TENSOR_DOMAIN) + 4 :].split(b"\x07", 1)[0].decode("ascii", "replace") for p in prefixes
        )
        return sha256_lanes(prefixes, datas, checks)

    with_lanes = digest_state(state, lanes)
    assert with_lanes == digest_state(state)
    assert dict(with_lanes.tensors) == {n: digest_tensor(n, a) for n, a in state.items()}
    assert len(seen) > 60  # most tensors went through the lanes
    assert not any("embedding" in s or "double" in s for s in seen)  # the largest and the float64 did not


def test_a_state_of_only_small_tensors_and_one_processor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensor_digest, "_hash_threads", lambda: 1)
    monkeypatch.setattr(tensor_digest, "LANE_MIN_BYTES", 0)
    state = {f"t{i}": np.full(i, np.float32(i)) for i in range(100)}
    assert digest_state(state, sha256_lanes) == digest_state(state)


def test_a_bad_tensor_is_refused_by_name_as_without_lanes() -> None:
    with pytest.raises(tensor_digest.InputError, match="tensor 'bad': cannot digest"):
        digest_state({"good": np.zeros(3, np.float32), "bad": np.zeros(3, np.complex64)}, sha256_lanes)


def test_tensors_under_the_lanes_minimum_go_to_hashlib() -> None:
    """Staging a message for the lanes costs more than hashing a small tensor: those are hashlib's."""
    small = {f"small{i}": np.ones(100, np.float32) for i in range(20)}
    large = {f"large{i}": np.ones(tensor_digest.LANE_MIN_BYTES // 4, np.float32) for i in range(20)}
    sizes: list[int] = []

    def lanes(prefixes: list[bytes], datas: list[np.ndarray], checks: list[bool]):  # noqa: ANN202
        sizes.extend(d.nbytes for d in datas)
        return sha256_lanes(prefixes, datas, checks)

    state = small | large
    assert digest_state(state, lanes) == digest_state(state)
    assert sorted(sizes) == [tensor_digest.LANE_MIN_BYTES] * 20


def test_a_large_states_digest_in_run_goes_through_the_kernels_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    """p2paudit.run.digest.digest_state (replays, publishing, checkpoints) hands a state of LANES_MIN_BYTES
    or more to kernels.state_lanes()'s lanes, and a smaller one to hashlib: the same digests either way."""
    import kernels
    from p2paudit.run import digest as run_digest

    called: list[int] = []

    def counting(prefixes: list[bytes], datas: list[np.ndarray], checks: list[bool]):  # noqa: ANN202
        called.append(len(datas))
        return sha256_lanes(prefixes, datas, checks)

    monkeypatch.setattr(kernels, "state_lanes", lambda: counting)
    monkeypatch.setattr(tensor_digest, "_hash_threads", lambda: 2)  # each tensor within the lanes' share
    rng = np.random.default_rng(9)
    large = {f"t{i}": rng.standard_normal(1 << 18).astype(np.float32) for i in range(run_digest.LANES_MIN_BYTES >> 20)}
    assert run_digest.digest_state(large) == digest_state(large)
    assert sum(called) == len(large)
    small = dict(list(large.items())[:3])
    assert run_digest.digest_state(small) == digest_state(small)
    assert sum(called) == len(large)  # not called again


def test_each_job_converts_its_own_tensors_and_a_bad_one_stops_all_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """A strided or big-endian tensor's C-order little-endian copy is made by the job that hashes it, on that
    job's thread, not all of them up front on the caller's (the state is never held twice over); a tensor the
    format cannot digest is refused before any is hashed."""
    monkeypatch.setattr(tensor_digest, "PARALLEL_HASH_BYTES", 1)
    monkeypatch.setattr(tensor_digest, "LANE_MIN_BYTES", 0)
    monkeypatch.setattr(tensor_digest, "_hash_threads", lambda: 2)
    converted: list[tuple[str, int]] = []
    real = tensor_digest._little_endian_c_order

    def converting(array: np.ndarray) -> np.ndarray:
        converted.append((array.dtype.str, threading.get_ident()))
        return real(array)

    monkeypatch.setattr(tensor_digest, "_little_endian_c_order", converting)
    state = _state()
    hashed: list[int] = []

    def lanes(prefixes: list[bytes], datas: list[np.ndarray], checks: list[bool]):  # noqa: ANN202
        hashed.append(len(prefixes))
        return sha256_lanes(prefixes, datas, checks)

    got = digest_state(state, lanes)
    assert dict(got.tensors) == {n: digest_tensor(n, a) for n, a in state.items()}
    assert len({thread for _, thread in converted}) == 2  # both jobs' threads converted their own
    state["opt/v/complex"] = np.zeros(3, np.complex64)
    converted.clear()
    hashed.clear()
    with pytest.raises(tensor_digest.InputError, match="opt/v/complex"):
        digest_state(state, lanes)
    assert converted == [] and hashed == []
