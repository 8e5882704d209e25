"""Tensor and state digests: SHA-256 over tensors by name, dtype, shape and bytes (a leaf module).

A leaf so that code below p2paudit.run (p2paudit.lab, which digests a lab's
state after each step) writes the one format; p2paudit.run.digest re-exports it.

Raw 32-byte digests are used inside the library; `sha256:<hex>` only at the
edges (manifest, CLI, records), through `format_digest` / `parse_digest`.

Tensor digest (one tensor called `name`, array `a`), all integers little-endian:

    SHA-256( b"p2paudit tensor v1\\0"
             || u32(len(name_utf8)) || name_utf8
             || u32(len(dtype)) || dtype          # numpy name: "float32", "int64", ...
             || u32(ndim) || u64(dim_0) .. u64(dim_{ndim-1})
             || the C-order little-endian bytes of a, every float NaN written as
                the quiet NaN 0x7FC00000 (float32) / 0x7FF8000000000000 (float64) )

State digest: SHA-256( b"p2paudit state v1\\0" || u32(count) || the raw
32-byte tensor digests (not their `sha256:` text) in order of the tensor names
sorted by their UTF-8 bytes ).
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from p2paudit.errors import InputError, InternalError

TENSOR_DOMAIN = b"p2paudit tensor v1\x00"
STATE_DOMAIN = b"p2paudit state v1\x00"
DIGEST_PREFIX = "sha256:"
_CANONICAL_NAN: dict[np.dtype[Any], np.unsignedinteger[Any]] = {
    np.dtype(np.float32): np.uint32(0x7FC00000),
    np.dtype(np.float64): np.uint64(0x7FF8000000000000),
}
_ALLOWED_KINDS = "fiub"
PARALLEL_HASH_BYTES = 8 << 20  # a state this large is hashed on every processor
HASH_CHUNK_BYTES = 1 << 20  # a tensor is checked for NaN and hashed this much at a time (in L2)


class StateDigestDict(TypedDict):
    digest: str
    tensors: dict[str, str]


@dataclass(frozen=True)
class StateDigest:
    """The digest of a whole training state and of each of its tensors (raw bytes)."""

    digest: bytes
    tensors: tuple[tuple[str, bytes], ...]  # (name, tensor digest), sorted by name

    def text(self) -> str:
        """The state digest as `sha256:<hex>`."""
        return format_digest(self.digest)

    def tensor_map(self) -> dict[str, bytes]:
        """Tensor name -> raw tensor digest."""
        return dict(self.tensors)

    def to_dict(self) -> StateDigestDict:
        """JSON-ready form: the digest and every tensor digest as `sha256:<hex>`."""
        return {"digest": self.text(), "tensors": {n: format_digest(d) for n, d in self.tensors}}

    @staticmethod
    def from_dict(data: object, where: str, names: list[str] | None = None) -> StateDigest:
        """Parse `to_dict` output strictly; `where` names the source for error messages.

        Exactly the keys "digest" and "tensors"; with `names`, the tensors are
        exactly those names. The digest must be the combination of the tensor digests.
        """
        if not isinstance(data, dict) or set(data) != {"digest", "tensors"} or not isinstance(data["tensors"], dict):
            keys = sorted(data)[:8] if isinstance(data, dict) else type(data).__name__
            raise InputError(f"{where}: state digest must be an object with exactly 'digest' and 'tensors', got {keys}")
        if names is not None and set(data["tensors"]) != set(names):
            missing = sorted(set(names) - set(data["tensors"]))[:3]
            extra = sorted(set(data["tensors"]) - set(names))[:3]
            raise InputError(
                f"{where}: tensors are not the config's state tensors (missing {missing}, "
                f"unexpected {[n[:80] for n in extra]})"
            )
        pairs = [(n, parse_digest(d, f"{where} tensor {n[:80]}")) for n, d in data["tensors"].items()]
        tensors = tuple(sorted(pairs, key=lambda pair: pair[0].encode("utf-8", "surrogatepass")))
        state = StateDigest(parse_digest(data["digest"], f"{where}.digest"), tensors)
        if combine_tensor_digests(tensors) != state.digest:
            raise InputError(f"{where}: state digest {state.text()} does not match its {len(tensors)} tensor digests")
        return state


def format_digest(raw: bytes) -> str:
    """Raw 32-byte SHA-256 -> `sha256:<64 hex digits>`."""
    return DIGEST_PREFIX + raw.hex()


def parse_digest(text: object, where: str = "digest") -> bytes:
    """`sha256:<64 hex digits>` -> 32 raw bytes; InputError naming `where` otherwise."""
    if not isinstance(text, str) or not text.startswith(DIGEST_PREFIX):
        raise InputError(f"{where}: expected 'sha256:<64 hex digits>', got {str(text)[:80]!r}")
    hexpart = text[len(DIGEST_PREFIX) :]
    if len(hexpart) != 64:
        raise InputError(f"{where}: digest has {len(hexpart)} hex digits, want 64")
    if hexpart != hexpart.lower():
        raise InputError(f"{where}: digest must be lower-case hex")
    try:
        return bytes.fromhex(hexpart)
    except ValueError:
        raise InputError(f"{where}: digest is not hexadecimal: {hexpart[:80]!r}") from None


def _little_endian_c_order(array: np.ndarray) -> np.ndarray:
    """The array as C-contiguous little-endian data (no copy when it already is)."""
    # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
    a = array if array.flags.c_contiguous else array.copy(order="C")
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and not np.little_endian):
        a = a.astype(a.dtype.newbyteorder("<"))
    return a


def _canonical_nans(a: np.ndarray) -> np.ndarray:
    """A C-contiguous little-endian array with every float NaN written as the canonical quiet NaN.

    No copy when there is no NaN: numpy's max is NaN whenever any element is NaN, so one fast
    reduction (a third of a sum's time, 2% of hashing the same bytes) decides whether the slower
    rewrite is needed.
    """
    with np.errstate(invalid="ignore"):
        maybe_nan = a.dtype.kind == "f" and a.size and np.isnan(np.max(a))
    if maybe_nan:
        nan_mask = np.isnan(a)
        if nan_mask.any():
            bits = a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint64).copy()
            bits[nan_mask] = _CANONICAL_NAN[np.dtype(a.dtype.name)]
            a = bits.view(a.dtype)
    return a


def _checked_data(name: str, array: np.ndarray) -> np.ndarray:
    """The array's C-order little-endian data, or InputError for what the format does not digest."""
    _check_kind(name, array)
    return _little_endian_c_order(array)


def _check_kind(name: str, array: np.ndarray) -> None:
    """InputError unless the format digests the array's dtype (float32, float64, integers, bools)."""
    if (
        not isinstance(array, np.ndarray)
        or array.dtype.kind not in _ALLOWED_KINDS
        or (array.dtype.kind == "f" and array.dtype.itemsize not in (4, 8))
    ):
        raise InputError(
            f"tensor {name!r}: cannot digest {type(array).__name__} of dtype {getattr(array, 'dtype', '?')}"
        )


def _header(name: str, data: np.ndarray) -> bytes:
    """What the tensor digest hashes before the data: domain, name, dtype and shape."""
    return _header_of(name, data.dtype, data.shape)


def _header_of(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    name_bytes = name.encode("utf-8")
    dtype_bytes = dtype.name.encode("ascii")
    return b"".join(
        [
            TENSOR_DOMAIN,
            struct.pack("<I", len(name_bytes)),
            name_bytes,
            struct.pack("<I", len(dtype_bytes)),
            dtype_bytes,
            struct.pack("<I", len(shape)),
            struct.pack(f"<{len(shape)}Q", *shape),
        ]
    )


def digest_tensor(name: str, array: np.ndarray) -> bytes:
    """Raw SHA-256 of one named tensor (see the module docstring for the layout), through TensorHasher.

    Precondition: a numpy array of float32, float64, integers or bools.
    """
    data = _checked_data(name, array)
    hasher = TensorHasher(name, data.dtype, data.shape)
    hasher.update(data.reshape(-1).data.cast("B"))  # C-contiguous: the array's own buffer, no copy
    return hasher.digest()


class TensorHasher:
    """digest_tensor's digest of a tensor given as its C-order little-endian bytes, in pieces of any length
    (a checkpoint read from a pipe: nothing of it kept but a partial element). Precondition: a dtype the
    format digests (float32, float64, integers, bools)."""

    def __init__(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self._dtype = np.dtype(dtype).newbyteorder("<")
        self._hash = hashlib.sha256(_header_of(name, self._dtype, shape))
        self._left = math.prod(shape) * self._dtype.itemsize
        self._partial = b""

    def update(self, piece: bytes | memoryview) -> None:
        """Hash the next bytes (the caller gives no more than the tensor's length), HASH_CHUNK_BYTES at a
        time, each piece checked for NaN (and rewritten if it holds one) just before it is hashed, while it
        is in cache: the same bytes as canonicalising the whole tensor first, read from memory once."""
        data = self._partial + bytes(piece) if self._partial else piece
        whole = len(data) - len(data) % self._dtype.itemsize
        self._partial = bytes(data[whole:])
        self._left -= whole
        for i in range(0, whole, HASH_CHUNK_BYTES):
            chunk = np.frombuffer(data[i : min(whole, i + HASH_CHUNK_BYTES)], dtype=self._dtype)
            self._hash.update(_canonical_nans(chunk).data.cast("B"))

    def digest(self) -> bytes:
        """The raw tensor digest, once every byte has come; InternalError before."""
        if self._left or self._partial:
            raise InternalError(f"tensor digest taken with {self._left + len(self._partial)} bytes not hashed")
        return self._hash.digest()


def combine_tensor_digests(tensors: tuple[tuple[str, bytes], ...]) -> bytes:
    """The state digest from (name, tensor digest) pairs already sorted by name."""
    h = hashlib.sha256(STATE_DOMAIN + struct.pack("<I", len(tensors)))
    for _, d in tensors:
        h.update(d)
    return h.digest()


def _hash_threads() -> int:
    """How many threads hash a large state: the processors this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class _HashPool:
    """The threads that hash a large state beside the calling one, started once and kept.

    A pool started per call cost a thread start and a future per tensor (a 136-tensor state:
    milliseconds of a 50 ms digest); a forked child starts its own (threads do not survive fork).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool: ThreadPoolExecutor | None = None
        self.size = 0

    def get(self, workers: int) -> ThreadPoolExecutor:
        with self.lock:
            if self.pool is None or self.size < workers:
                # A larger pool replaces the kept one, which is not shut down: a caller holding it may still
                # submit its lists, and its idle threads end once the last reference to it is dropped.
                self.pool, self.size = ThreadPoolExecutor(workers, thread_name_prefix="digest"), workers
            return self.pool

    def forget(self) -> None:
        self.lock = threading.Lock()
        self.pool, self.size = None, 0


_POOL = _HashPool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.forget)


def _balanced_bins(names: list[str], sizes: Mapping[str, float], count: int) -> list[list[str]]:
    """The names cut into `count` lists of nearly equal total size: largest first, each to the lightest list."""
    bins: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for n in sorted(names, key=lambda n: -sizes[n]):
        lightest = loads.index(min(loads))
        bins[lightest].append(n)
        loads[lightest] += sizes[n]
    return bins


Lanes = Callable[[list[bytes], list[np.ndarray], list[bool]], tuple[list[bytes], list[bool]]]
"""SHA-256 of many (prefix, array) messages at once, and per message whether its float32 data held a NaN
(kernels/cpu_sha256.sha256_lanes: sixteen messages share each vector instruction)."""

LANE_SPEEDUP = 1.75  # the lanes' bytes per second over hashlib's, measured (docs/benchmarks.md): plans' weights
LANE_COUNT = 16  # messages one lanes call hashes side by side
LANE_MIN_BYTES = 64 << 10  # a smaller tensor costs the lanes more to stage (~15 us) than hashlib to hash


def digest_state(state: Mapping[str, np.ndarray], lanes: Lanes | None = None) -> StateDigest:
    """Digest every tensor of a training state and combine them (names sorted by UTF-8).

    The tensor digests are independent, so a large state's are computed on every processor (SHA-256 and
    numpy's sum release the GIL): the tensors cut into one list per processor of nearly equal bytes, the
    calling thread hashing one list and the kept pool the others; the combination is in name order as always.
    With `lanes` (the caller's choice: the kernels know whether they are faster here) the tensors that are not
    far larger than the others go through it instead of hashlib, in the same format (_digest_with_lanes).
    """
    names = sorted(state, key=lambda n: n.encode("utf-8"))
    arrays = {n: np.asarray(state[n]) for n in names}
    if lanes is not None:
        return _digest_with_lanes(names, arrays, lanes)
    threads = min(_hash_threads(), len(names))
    if threads < 2 or sum(a.nbytes for a in arrays.values()) < PARALLEL_HASH_BYTES:
        tensors = tuple((n, digest_tensor(n, arrays[n])) for n in names)
        return StateDigest(combine_tensor_digests(tensors), tensors)

    def hash_list(some: list[str]) -> list[tuple[str, bytes]]:
        return [(n, digest_tensor(n, arrays[n])) for n in some]

    return _on_every_thread(names, _balanced_bins(names, {n: arrays[n].nbytes for n in names}, threads), hash_list)


def _digest_with_lanes(names: list[str], arrays: dict[str, np.ndarray], lanes: Lanes) -> StateDigest:
    """digest_state's result, the tensor digests taken by `lanes` where that is faster.

    Each lane hashes one message at a time, so a tensor above the lanes' fair share (their bytes over
    processors x LANE_COUNT lanes) would keep one lane busy after the rest finished: those, tensors under
    LANE_MIN_BYTES (staging one costs more than hashing it), float64 tensors
    (a NaN check of their own) and any tensor in which the lanes saw a NaN (written canonically by
    digest_tensor) go to hashlib. Every processor gets a share of both kinds, balanced by their expected time.
    """
    for n in names:
        _check_kind(n, arrays[n])  # every tensor's dtype before any is hashed; its bytes converted by its job
    sizes = {n: arrays[n].nbytes for n in names}
    wide = {n for n in names if arrays[n].dtype.kind == "f" and arrays[n].dtype.itemsize == 8}  # float64, either order
    by_lanes = sorted((n for n in names if n not in wide and sizes[n] >= LANE_MIN_BYTES), key=lambda n: -sizes[n])
    threads = max(1, min(_hash_threads(), len(names)))
    if sum(sizes.values()) < PARALLEL_HASH_BYTES:
        threads = 1
    lane_bytes = sum(sizes[n] for n in by_lanes)
    while by_lanes and sizes[by_lanes[0]] * threads * LANE_COUNT > lane_bytes:
        lane_bytes -= sizes[by_lanes.pop(0)]  # the largest is more than one lane's share: hashlib's
    lane_set = set(by_lanes)
    cost = {n: sizes[n] / LANE_SPEEDUP if n in lane_set else sizes[n] for n in names}
    jobs = _balanced_bins(names, cost, threads)

    def run(job: list[str]) -> list[tuple[str, bytes]]:
        # C-order little-endian bytes made here, on the job's thread, and dropped with the job: a state of
        # strided or big-endian tensors is not held twice over while it is hashed
        data = {n: _little_endian_c_order(arrays[n]) for n in job}
        mine = [n for n in job if n in lane_set]
        got = []
        if mine:
            digests, nan_seen = lanes(
                [_header(n, data[n]) for n in mine],
                [data[n] for n in mine],
                [data[n].dtype == np.float32 for n in mine],
            )
            got = [(n, d) for n, d, nan in zip(mine, digests, nan_seen) if not nan]
        done = {n for n, _ in got}
        return got + [(n, digest_tensor(n, data[n])) for n in job if n not in done]

    return _on_every_thread(names, jobs, run)


def _on_every_thread(
    names: list[str], jobs: list[list[str]], digest: Callable[[list[str]], list[tuple[str, bytes]]]
) -> StateDigest:
    """The state digest of `names` from digest(job) of each job: the first on the calling thread, the others
    on the kept pool meanwhile; combined in name order."""
    mine, *theirs = jobs
    futures = [_POOL.get(len(theirs)).submit(digest, job) for job in theirs] if theirs else []
    got = dict(digest(mine))
    for f in futures:
        got.update(f.result())
    tensors = tuple((n, got[n]) for n in names)
    return StateDigest(combine_tensor_digests(tensors), tensors)
