"""Rendezvous step assignment: the documented encoding, determinism, the rendezvous property, balance, steps_for."""

import hashlib
import random

import pytest

from p2paudit.errors import InputError
from p2paudit.node.assign.assignment import assigned_keys, pick_value, rendezvous_weight, steps_for

RUN = bytes(range(32))
KEY_A = bytes([0xAA]) * 32
KEY_B = bytes(range(32, 64))

# Committed test vector: (step, weight of KEY_A, weight of KEY_B, pick value of KEY_A) for run RUN.
VECTOR = [
    (0, 0x175720792CAFB725, 0x9DEB0B5D3F81AE9B, 0x80886E29A47E467C),
    (1, 0xC01FB1C45A3F91AA, 0x36FB66CBAC7DC2CB, 0x50A9DCE8B7F89C4B),
    (99999, 0x485DDF49C7D97A08, 0xBFD2B567BA488486, 0x91845C2DACD079A9),
    (2**64 - 1, 0x199E952E02F45F83, 0x550804449DF3E646, 0x39CA2419D73D174F),
]


def _keys(n, seed=0):
    rng = random.Random(seed)
    return [rng.randbytes(32) for _ in range(n)]


def _documented(domain, run_id, step, key):
    message = domain + len(run_id).to_bytes(2, "big") + run_id + step.to_bytes(8, "big")
    message += len(key).to_bytes(2, "big") + key
    return int.from_bytes(hashlib.sha256(message).digest()[:8], "big")


@pytest.mark.parametrize("step,weight_a,weight_b,pick_a", VECTOR)
def test_committed_vector_and_documented_encoding(step, weight_a, weight_b, pick_a):
    assert rendezvous_weight(RUN, step, KEY_A) == weight_a
    assert rendezvous_weight(RUN, step, KEY_B) == weight_b
    assert pick_value(RUN, step, KEY_A) == pick_a
    assert _documented(b"p2paudit/assign/v1\x00", RUN, step, KEY_A) == weight_a
    assert _documented(b"p2paudit/pick/v1\x00", RUN, step, KEY_A) == pick_a


def test_assigned_keys_are_the_highest_weights_whatever_the_key_order():
    keys = _keys(30)
    for step in range(50):
        ranked = sorted(keys, key=lambda k: (rendezvous_weight(RUN, step, k), k), reverse=True)
        assert assigned_keys(RUN, step, keys, 3) == tuple(ranked[:3])
        shuffled = keys[:]
        random.Random(step).shuffle(shuffled)
        assert assigned_keys(RUN, step, shuffled, 3) == tuple(ranked[:3])
    assert assigned_keys(RUN, 0, keys[:2], 5) == tuple(
        sorted(keys[:2], key=lambda k: rendezvous_weight(RUN, 0, k))[::-1]
    )
    other_run = bytes(32)
    assert any(assigned_keys(RUN, s, keys, 2) != assigned_keys(other_run, s, keys, 2) for s in range(20))


def test_a_joining_key_moves_only_the_steps_it_wins():
    steps, n, r = 2000, 20, 2
    keys = _keys(n + 1, seed=1)
    old, new = keys[:n], keys
    joiner = keys[n]
    moved = 0
    for step in range(steps):
        before, after = assigned_keys(RUN, step, old, r), assigned_keys(RUN, step, new, r)
        if joiner in after:
            moved += 1
            assert set(before) - set(after) == {before[-1]}  # the joiner displaced the last of the old ones only
        else:
            assert before == after
    expected = steps * r / (n + 1)  # ~190.5; binomial sd ~13
    assert abs(moved - expected) < 5 * (expected * (1 - r / (n + 1))) ** 0.5


def test_a_leaving_key_moves_only_the_steps_it_held():
    keys = _keys(15, seed=2)
    leaver = keys[4]
    rest = keys[:4] + keys[5:]
    for step in range(500):
        before, after = assigned_keys(RUN, step, keys, 2), assigned_keys(RUN, step, rest, 2)
        if leaver not in before:
            assert before == after


def test_every_key_gets_about_its_share():
    steps, n, r = 5000, 25, 2
    keys = _keys(n, seed=3)
    counts = dict.fromkeys(keys, 0)
    for step in range(steps):
        for key in assigned_keys(RUN, step, keys, r):
            counts[key] += 1
    assert sum(counts.values()) == steps * r
    expected = steps * r / n  # 400 each
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 60, f"chi-square {chi2:.1f} with 24 degrees of freedom (p < 1e-4 above 60)"
    assert min(counts.values()) > 0.8 * expected and max(counts.values()) < 1.2 * expected


def _brute_steps_for(run, steps, me, keys, r, done, k):
    auditors = keys if me in keys else keys + [me]
    mine = [s for s in range(steps) if me in assigned_keys(run, s, auditors, r) and done.get(s, 0) < r]
    mine.sort(key=lambda s: (pick_value(run, s, me), s))
    return tuple(mine if k is None else mine[:k])


def test_steps_for_is_the_assigned_steps_in_pick_order():
    keys = _keys(15, seed=4)
    me = keys[7]
    everything = steps_for(RUN, 300, me, keys, 2)
    assert everything == _brute_steps_for(RUN, 300, me, keys, 2, {}, None)
    assert 20 <= len(everything) <= 60  # about 300 * 2 / 15 = 40
    assert steps_for(RUN, 300, me, keys, 2, k=5) == everything[:5]
    assert steps_for(RUN, 300, me, keys, 2, k=0) == ()
    outsider = _keys(1, seed=99)[0]
    assert steps_for(RUN, 300, outsider, keys, 2, k=8) == _brute_steps_for(RUN, 300, outsider, keys, 2, {}, 8)


def test_steps_for_skips_steps_checked_r_times():
    keys = _keys(10, seed=5)
    me = keys[0]
    first = steps_for(RUN, 200, me, keys, 2, k=6)
    done = {first[0]: 2, first[1]: 5, first[2]: 1}  # two done (>= r), one still short of r
    again = steps_for(RUN, 200, me, keys, 2, done=done, k=6)
    assert first[0] not in again and first[1] not in again and first[2] in again
    assert again == _brute_steps_for(RUN, 200, me, keys, 2, done, 6)
    assert again[:4] == first[2:6]


def test_bad_input_is_refused():
    keys = _keys(3)
    with pytest.raises(InputError, match="duplicates"):
        assigned_keys(RUN, 0, keys + keys[:1], 2)
    with pytest.raises(InputError, match="redundancy"):
        assigned_keys(RUN, 0, keys, 0)
    for step in (-1, 2**64, 1.0):
        with pytest.raises(InputError, match="step"):
            rendezvous_weight(RUN, step, KEY_A)
    with pytest.raises(InputError, match="key is 0 bytes"):
        rendezvous_weight(RUN, 0, b"")
    with pytest.raises(InputError, match="run id"):
        rendezvous_weight("not bytes", 0, KEY_A)
    with pytest.raises(InputError, match="num_steps"):
        steps_for(RUN, -1, KEY_A, keys)
    with pytest.raises(InputError, match="k "):
        steps_for(RUN, 10, KEY_A, keys, k=-1)
