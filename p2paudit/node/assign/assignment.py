"""Which steps of a run a node audits, without coordination: rendezvous hashing.

Every auditor of a run computes, for every step, a weight per known auditor
key; the `r` keys with the highest weights are the step's assigned auditors.
Nobody coordinates: two nodes that know the same keys compute the same
assignment, and a key that joins or leaves moves only the steps it wins or
held (the rendezvous, or highest-random-weight, property).

The weight, byte for byte (so another implementation assigns the same steps):

    message = b"p2paudit/assign/v1" 0x00      # ASSIGN_DOMAIN, 19 bytes
              u16be(len(run_id)) run_id       # the run id (32 raw bytes in practice)
              u64be(step)                     # step number, 0 <= step < 2**64
              u16be(len(key)) key             # the auditor's public key (32 raw bytes)
    weight  = int.from_bytes(SHA-256(message)[:8], "big")   # 0 <= weight < 2**64

Keys are ranked by (weight, key) in descending order: the higher weight wins,
and a tie of weights (probability 2**-64 per pair) goes to the larger key
bytes, compared as unsigned bytes. The assigned keys of a step are the first
`min(r, number of keys)` in that ranking.

A node usually has more assigned steps than it wants to audit now (about
`S*r/N` of a run's S steps with N known auditors). It takes them in increasing
order of its pick value, the same construction under another domain:

    pick = int.from_bytes(SHA-256(b"p2paudit/pick/v1" 0x00 || u16be(len(run_id)) run_id
                                  || u64be(step) || u16be(len(key)) key)[:8], "big")

ties going to the lower step. The pick order is independent of the weights, so
the r auditors of a step choose it independently of one another (which is what
`plan` assumes), and it is fixed, so a node that restarts picks the same steps.

Cost: one weight is one SHA-256 of ~95 bytes (about 0.5 us with hashlib;
SHA-256 dominates, so numpy cannot help and a plain hashlib loop is used).
`assigned_keys` hashes every key once: O(N). `steps_for` does not build the
whole S x N table: it walks steps in pick order and, per step, hashes the
node's own key and then the others in a fixed order until r of them beat it.
If its weight sits at quantile u among the keys, that takes about r/(1-u)
hashes, so r*(1 + ln(N/r)) on average and N at worst; it stops once k steps
are found, after about k*N/r steps. For S = 100,000, N = 10,000, r = 2, k = 10
that is ~100,000 pick hashes plus ~50,000 steps x ~20 weights: about a second.

Pure: no I/O. Inputs are checked and refused with InputError (exit 2).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from p2paudit.defaults import DEFAULT_REDUNDANCY as DEFAULT_REDUNDANCY  # re-exported: plan and tests import it here
from p2paudit.errors import InputError

ASSIGN_DOMAIN = b"p2paudit/assign/v1\x00"
PICK_DOMAIN = b"p2paudit/pick/v1\x00"
MAX_STEP = 2**64 - 1
_MAX_FIELD = 2**16 - 1


def _field(name: str, value: bytes) -> bytes:
    if not isinstance(value, bytes | bytearray):
        raise InputError(f"{name} must be bytes, got {type(value).__name__}")
    if not 1 <= len(value) <= _MAX_FIELD:
        raise InputError(f"{name} is {len(value)} bytes, want 1 to {_MAX_FIELD}")
    return len(value).to_bytes(2, "big") + bytes(value)


def _check_step(step: int) -> None:
    if type(step) is not int or not 0 <= step <= MAX_STEP:
        raise InputError(f"step {step!r} is not an integer in [0, 2**64)")


def _check_redundancy(r: int) -> None:
    if type(r) is not int or r < 1:
        raise InputError(f"redundancy {r!r} must be an integer >= 1")


def _step_prefix(domain: bytes, run_id: bytes, step: int) -> bytes:
    return domain + _field("run id", run_id) + step.to_bytes(8, "big")


def _digest64(prefix: bytes, key_field: bytes) -> int:
    return int.from_bytes(hashlib.sha256(prefix + key_field).digest()[:8], "big")


def rendezvous_weight(run_id: bytes, step: int, key: bytes) -> int:
    """The weight of `key` for `step` of `run_id`: a 64-bit integer (encoding in the module docstring)."""
    _check_step(step)
    return _digest64(_step_prefix(ASSIGN_DOMAIN, run_id, step), _field("key", key))


def pick_value(run_id: bytes, step: int, key: bytes) -> int:
    """The order in which `key` takes its assigned steps: lower first (encoding in the module docstring)."""
    _check_step(step)
    return _digest64(_step_prefix(PICK_DOMAIN, run_id, step), _field("key", key))


def _key_fields(keys: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
    """(key, encoded field) for each key; refuses duplicates, which would count one auditor twice."""
    fields = [(bytes(key), _field("key", key)) for key in keys]
    if len({key for key, _ in fields}) != len(fields):
        raise InputError(f"the {len(fields)} auditor keys contain duplicates")
    return fields


def assigned_keys(run_id: bytes, step: int, keys: Sequence[bytes], r: int = DEFAULT_REDUNDANCY) -> tuple[bytes, ...]:
    """The min(r, len(keys)) keys assigned to `step`, highest (weight, key) first. O(len(keys)) hashes."""
    _check_step(step)
    _check_redundancy(r)
    prefix = _step_prefix(ASSIGN_DOMAIN, run_id, step)
    ranked = sorted(((_digest64(prefix, field), key) for key, field in _key_fields(keys)), reverse=True)
    return tuple(key for _, key in ranked[:r])


def _is_assigned(prefix: bytes, me: bytes, my_field: bytes, others: list[tuple[bytes, bytes]], r: int) -> bool:
    """Whether fewer than r of `others` outrank `me` at this step; stops at the r-th that does."""
    mine = (_digest64(prefix, my_field), me)
    beaten_by = 0
    for key, field in others:
        if (_digest64(prefix, field), key) > mine:
            beaten_by += 1
            if beaten_by >= r:
                return False
    return True


def steps_for(
    run_id: bytes,
    num_steps: int,
    me: bytes,
    keys: Sequence[bytes],
    r: int = DEFAULT_REDUNDANCY,
    done: Mapping[int, int] | None = None,
    k: int | None = None,
) -> tuple[int, ...]:
    """The steps `me` should audit next, in the order to audit them.

    The auditors are `keys` plus `me` (it may or may not be listed). A step of
    0..num_steps-1 qualifies if `me` is among its r assigned keys and fewer
    than r trusted checks of it are known (`done`: step -> count of checks by
    keys this node trusts; the caller decides whom it trusts). Qualifying steps
    are returned in increasing pick value, at most `k` of them (all if None).
    """
    if type(num_steps) is not int or num_steps < 0 or num_steps > MAX_STEP + 1:
        raise InputError(f"num_steps {num_steps!r} must be an integer in [0, 2**64]")
    _check_redundancy(r)
    if k is not None and (type(k) is not int or k < 0):
        raise InputError(f"k {k!r} must be an integer >= 0 or None")
    done = done or {}
    my_field = _field("key", me)
    others = [(key, field) for key, field in _key_fields(keys) if key != bytes(me)]
    limit = num_steps if k is None else min(k, num_steps)
    if limit == 0:
        return ()
    pick_prefix = PICK_DOMAIN + _field("run id", run_id)
    order = sorted(range(num_steps), key=lambda s: (_digest64(pick_prefix + s.to_bytes(8, "big"), my_field), s))
    chosen: list[int] = []
    for step in order:
        if done.get(step, 0) >= r:
            continue
        prefix = _step_prefix(ASSIGN_DOMAIN, run_id, step)
        if _is_assigned(prefix, bytes(me), my_field, others, r):
            chosen.append(step)
            if len(chosen) == limit:
                break
    return tuple(chosen)
