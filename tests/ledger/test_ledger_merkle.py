"""RFC 9162 hashing, proof paths and verification: published vectors, mutations, a naive reference, properties."""

from __future__ import annotations

import random

import ledger_naive as naive
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import merkle
from ledger.errors import ProofError

# The RFC 6962 / certificate-transparency test tree of 8 leaves, as used by
# transparency-dev/merkle (proof/verify_test.go): the leaf data, the roots of
# the trees of sizes 1..8, and published inclusion and consistency proofs.
LEAVES = [
    bytes.fromhex(h)
    for h in ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]
]
ROOTS = [
    bytes.fromhex(h)
    for h in [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ]
]
EMPTY = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")


def _h(*hexes: str) -> list[bytes]:
    return [bytes.fromhex(x) for x in hexes]


# (index, size, proof): index is 0-based here.
INCLUSION_VECTORS = [
    (0, 1, []),
    (
        0,
        8,
        _h(
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ),
    ),
    (
        5,
        8,
        _h(
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
    (2, 3, _h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")),
    (
        1,
        5,
        _h(
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ),
    ),
]
CONSISTENCY_VECTORS = [
    (1, 1, []),
    (
        1,
        8,
        _h(
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ),
    ),
    (
        6,
        8,
        _h(
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
    (
        2,
        5,
        _h(
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ),
    ),
    (
        6,
        7,
        _h(
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ),
    ),
]

# Which subtrees make a proof, from transparency-dev/merkle's proof/proof_test.go node tables,
# rewritten as leaf ranges [start, end) in proof order.
INCLUSION_PATHS = {
    (0, 1): [],
    (0, 2): [(1, 2)],
    (1, 3): [(0, 1), (2, 3)],
    (0, 7): [(1, 2), (2, 4), (4, 7)],
    (2, 7): [(3, 4), (0, 2), (4, 7)],
    (4, 7): [(5, 6), (6, 7), (0, 4)],
    (6, 7): [(4, 6), (0, 4)],
    (3, 5): [(2, 3), (0, 2), (4, 5)],
    (4, 6): [(5, 6), (0, 4)],
    (10, 15): [(11, 12), (8, 10), (12, 15), (0, 8)],
    (24, 31): [(25, 26), (26, 28), (28, 31), (16, 24), (0, 16)],
    (81, 95): [(80, 81), (82, 84), (84, 88), (88, 95), (64, 80), (0, 64)],
}
CONSISTENCY_PATHS = {
    (1, 2): [(1, 2)],
    (1, 4): [(1, 2), (2, 4)],
    (1, 6): [(1, 2), (2, 4), (4, 6)],
    (2, 3): [(2, 3)],
    (2, 8): [(2, 4), (4, 8)],
    (3, 7): [(2, 3), (3, 4), (0, 2), (4, 7)],
    (4, 7): [(4, 7)],
    (5, 7): [(4, 5), (5, 6), (6, 7), (0, 4)],
    (6, 7): [(4, 6), (6, 7), (0, 4)],
    (7, 8): [(6, 7), (7, 8), (4, 6), (0, 4)],
    (3, 5): [(2, 3), (3, 4), (0, 2), (4, 5)],
    (1, 7): [(1, 2), (2, 4), (4, 7)],
    (10, 15): [(8, 10), (10, 12), (12, 15), (0, 8)],
    (24, 31): [(16, 24), (24, 31), (0, 16)],
    (81, 95): [(80, 81), (81, 82), (82, 84), (84, 88), (88, 95), (64, 80), (0, 64)],
    (5, 5): [],
    (0, 0): [],  # (0, 9) has no proof: see test_no_consistency_proof_from_the_empty_tree
}

LEAF_HASHES = [merkle.leaf_hash(e) for e in LEAVES]


def test_hashes_have_the_rfc_prefixes():
    assert merkle.leaf_hash(b"abc") == naive.sha(b"\x00abc")
    assert merkle.node_hash(b"l" * 32, b"r" * 32) == naive.sha(b"\x01" + b"l" * 32 + b"r" * 32)
    assert merkle.EMPTY_ROOT == EMPTY == merkle.root_from_leaf_hashes([])


@pytest.mark.parametrize("size", range(1, 9))
def test_roots_of_the_published_tree(size):
    assert merkle.root_from_leaf_hashes(LEAF_HASHES[:size]) == ROOTS[size - 1]
    assert naive.mth(LEAVES[:size]) == ROOTS[size - 1]


@pytest.mark.parametrize("index,size,proof", INCLUSION_VECTORS)
def test_published_inclusion_proofs_are_generated_and_verify(index, size, proof):
    assert merkle.inclusion_proof(index, size, merkle.subtree_hasher(LEAF_HASHES)) == proof
    merkle.verify_inclusion(LEAF_HASHES[index], index, size, proof, ROOTS[size - 1])


@pytest.mark.parametrize("size1,size2,proof", CONSISTENCY_VECTORS)
def test_published_consistency_proofs_are_generated_and_verify(size1, size2, proof):
    assert merkle.consistency_proof(size1, size2, merkle.subtree_hasher(LEAF_HASHES)) == proof
    merkle.verify_consistency(size1, size2, proof, ROOTS[size1 - 1], ROOTS[size2 - 1])


@pytest.mark.parametrize("key", sorted(INCLUSION_PATHS))
def test_inclusion_paths_name_the_published_nodes(key):
    assert merkle.inclusion_path(*key) == INCLUSION_PATHS[key]


@pytest.mark.parametrize("key", sorted(CONSISTENCY_PATHS))
def test_consistency_paths_name_the_published_nodes(key):
    assert merkle.consistency_path(*key) == CONSISTENCY_PATHS[key]


def test_every_proof_of_the_eight_leaf_tree_matches_the_naive_rfc_definitions():
    # The vectors above cover a few (index, size) pairs; the rest are recomputed from the RFC's definitions.
    for size in range(1, 9):
        for index in range(size):
            proof = merkle.inclusion_proof(index, size, merkle.subtree_hasher(LEAF_HASHES))
            assert proof == naive.path(index, LEAVES[:size])
            merkle.verify_inclusion(LEAF_HASHES[index], index, size, proof, ROOTS[size - 1])
        with pytest.raises(ProofError, match=f"no consistency proof from the empty tree to size {size}"):
            merkle.consistency_proof(0, size, merkle.subtree_hasher(LEAF_HASHES))
        for size1 in range(1, size + 1):
            proof = merkle.consistency_proof(size1, size, merkle.subtree_hasher(LEAF_HASHES))
            assert proof == naive.proof(size1, LEAVES[:size])
            root1 = ROOTS[size1 - 1] if size1 else EMPTY
            merkle.verify_consistency(size1, size, proof, root1, ROOTS[size - 1])


def _flip(h: bytes, bit: int) -> bytes:
    b = bytearray(h)
    b[bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


def _root_of(size: int) -> bytes:
    """The honest root of the published tree at `size` (sizes past 8 extend it with more leaves)."""
    return merkle.root_from_leaf_hashes([merkle.leaf_hash(e) for e in (LEAVES + [b"x%d" % i for i in range(8)])[:size]])


def _inclusion_mutations(index, size, proof, leaf, root):
    """Every way to spoil a valid inclusion proof: (description, args).

    A changed size is paired with the honest root of that size: the RFC
    verifier is told the size and root of a signed tree head, and a proof for
    (index, n) can hash exactly like one for (index, n + 1) when both paths have
    the same shape (leaf 0 of 3 and of 4), so only a (size, root) pair that
    belongs together makes the claim meaningful.
    """
    out = [
        ("index - 1", (leaf, index - 1, size, proof, root)),
        ("index + 1", (leaf, index + 1, size, proof, root)),
        ("index ^ 2", (leaf, index ^ 2, size, proof, root)),
        ("size + 1", (leaf, index, size + 1, proof, _root_of(size + 1))),
        ("size - 1", (leaf, index, size - 1, proof, _root_of(size - 1))),
        ("size * 2", (leaf, index, size * 2, proof, root)),
        ("size * 2 with its root", (leaf, index, size * 2, proof, _root_of(size * 2))),
        ("size / 2", (leaf, index, size // 2, proof, root)),
        ("wrong leaf", (merkle.leaf_hash(b"wrong"), index, size, proof, root)),
        ("empty root", (leaf, index, size, proof, EMPTY)),
        ("trailing root", (leaf, index, size, [*proof, root], root)),
        ("preceding root", (leaf, index, size, [root, *proof], root)),
        ("trailing short garbage", (leaf, index, size, [*proof, b""], root)),
        ("leaf of 31 bytes", (leaf[:31], index, size, proof, root)),
        ("root of 33 bytes", (leaf, index, size, proof, root + b"\x00")),
    ]
    if proof:
        out.append(("truncated", (leaf, index, size, proof[:-1], root)))
        out.append(("empty proof", (leaf, index, size, [], root)))
        out.append(("first hash 31 bytes", (leaf, index, size, [proof[0][:31], *proof[1:]], root)))
        out.append(("last hash 33 bytes", (leaf, index, size, [*proof[:-1], proof[-1] + b"\x00"], root)))
        for i in range(len(proof)):
            for bit in range(256):
                bad = list(proof)
                bad[i] = _flip(bad[i], bit)
                out.append((f"proof[{i}] bit {bit}", (leaf, index, size, bad, root)))
    if len(proof) > 1:
        out.append(("reversed", (leaf, index, size, proof[::-1], root)))
        out.append(("first two swapped", (leaf, index, size, [proof[1], proof[0], *proof[2:]], root)))
    for bit in range(256):
        out.append((f"leaf bit {bit}", (_flip(leaf, bit), index, size, proof, root)))
        out.append((f"root bit {bit}", (leaf, index, size, proof, _flip(root, bit))))
    return out


def _consistency_mutations(size1, size2, proof, root1, root2):
    """Every way to spoil a valid consistency proof. As for inclusion, a changed size2 comes with its
    honest root: the proof from 2 to 3 hashes exactly like the proof from 2 to 4 (same shape)."""
    out = [
        ("size1 - 1", (size1 - 1, size2, proof, root1, root2)),
        ("size1 + 1", (size1 + 1, size2, proof, root1, root2)),
        ("size1 ^ 2", (size1 ^ 2, size2, proof, root1, root2)),
        ("size1 - 1 with its root", (size1 - 1, size2, proof, _root_of(size1 - 1), root2)),
        ("size1 + 1 with its root", (size1 + 1, size2, proof, _root_of(size1 + 1), root2)),
        ("size2 + 1 with its root", (size1, size2 + 1, proof, root1, _root_of(size2 + 1))),
        ("size2 - 1 with its root", (size1, size2 - 1, proof, root1, _root_of(size2 - 1))),
        ("size2 * 2", (size1, size2 * 2, proof, root1, root2)),
        ("size2 / 2", (size1, size2 // 2, proof, root1, root2)),
        ("swapped roots", (size1, size2, proof, root2, root1)),
        ("empty proof", (size1, size2, [], root1, root2)),
        ("truncated", (size1, size2, proof[:-1], root1, root2)),
        ("trailing root1", (size1, size2, [*proof, root1], root1, root2)),
        ("trailing root2", (size1, size2, [*proof, root2], root1, root2)),
        ("preceding root1", (size1, size2, [root1, *proof], root1, root2)),
        ("preceding proof[0]", (size1, size2, [proof[0], *proof], root1, root2)),
        ("preceding garbage", (size1, size2, [b"", *proof], root1, root2)),
        ("root1 of 12 bytes", (size1, size2, proof, b"WrongRoot123", root2)),
        ("last hash 31 bytes", (size1, size2, [*proof[:-1], proof[-1][:31]], root1, root2)),
    ]
    if len(proof) > 1:
        out.append(("reversed", (size1, size2, proof[::-1], root1, root2)))
    for i in range(len(proof)):
        for bit in range(256):
            bad = list(proof)
            bad[i] = _flip(bad[i], bit)
            out.append((f"proof[{i}] bit {bit}", (size1, size2, bad, root1, root2)))
    for bit in range(256):
        out.append((f"root1 bit {bit}", (size1, size2, proof, _flip(root1, bit), root2)))
        out.append((f"root2 bit {bit}", (size1, size2, proof, root1, _flip(root2, bit))))
    return out


@pytest.mark.parametrize("index,size", [(i, n) for n in range(1, 9) for i in range(n)])
def test_every_mutation_of_an_inclusion_proof_is_rejected(index, size):
    proof = merkle.inclusion_proof(index, size, merkle.subtree_hasher(LEAF_HASHES))
    merkle.verify_inclusion(LEAF_HASHES[index], index, size, proof, ROOTS[size - 1])  # the original holds
    for desc, args in _inclusion_mutations(index, size, proof, LEAF_HASHES[index], ROOTS[size - 1]):
        with pytest.raises(ProofError):
            merkle.verify_inclusion(*args)
            pytest.fail(f"accepted: {desc}")


@pytest.mark.parametrize("size1,size2", [(a, b) for b in range(2, 9) for a in range(1, b)])
def test_every_mutation_of_a_consistency_proof_is_rejected(size1, size2):
    proof = merkle.consistency_proof(size1, size2, merkle.subtree_hasher(LEAF_HASHES))
    root1, root2 = ROOTS[size1 - 1], ROOTS[size2 - 1]
    merkle.verify_consistency(size1, size2, proof, root1, root2)
    for desc, args in _consistency_mutations(size1, size2, proof, root1, root2):
        with pytest.raises(ProofError):
            merkle.verify_consistency(*args)
            pytest.fail(f"accepted: {desc}")


def test_trivial_consistency_cases():
    merkle.verify_consistency(0, 0, [], EMPTY, EMPTY)
    merkle.verify_consistency(3, 3, [], ROOTS[2], ROOTS[2])
    for args in [
        (3, 3, [], ROOTS[2], ROOTS[3]),  # same size, different roots
        (3, 3, [ROOTS[2]], ROOTS[2], ROOTS[2]),  # same size with a non-empty proof
        (4, 3, [], ROOTS[3], ROOTS[2]),  # time travel
        (1, 2, [], ROOTS[0], ROOTS[1]),
    ]:
        with pytest.raises(ProofError):
            merkle.verify_consistency(*args)


def test_no_consistency_proof_from_the_empty_tree():
    # transparency-dev/merkle: "consistency proof from empty tree is meaningless". Before the fix
    # 0 -> n accepted any new root with an empty proof, and 0 -> 0 any pair of equal roots.
    for size2 in (1, 2, 5, 8):
        for proof in ([], [EMPTY], [ROOTS[size2 - 1]]):
            for root1, root2 in [
                (EMPTY, ROOTS[size2 - 1]),
                (EMPTY, _flip(ROOTS[size2 - 1], 0)),
                (EMPTY, EMPTY),
                (ROOTS[0], ROOTS[size2 - 1]),
            ]:
                with pytest.raises(ProofError, match=f"from size 0 to {size2} refused: a proof from the empty tree"):
                    merkle.verify_consistency(0, size2, proof, root1, root2)
    with pytest.raises(ProofError, match="no consistency proof from the empty tree to size 9"):
        merkle.consistency_path(0, 9)


def test_consistency_from_zero_to_zero_needs_the_empty_root_on_both_sides():
    merkle.verify_consistency(0, 0, [], EMPTY, EMPTY)
    cases = [
        ([], ROOTS[3], ROOTS[3], "is not the empty tree's"),  # equal roots, but not of the empty tree
        ([], EMPTY, ROOTS[3], "differs from new root"),
        ([], ROOTS[3], EMPTY, "differs from new root"),
        ([], _flip(EMPTY, 7), _flip(EMPTY, 7), "is not the empty tree's"),
        ([EMPTY], EMPTY, EMPTY, "has 1 hashes, want 0"),
    ]
    for proof, root1, root2, message in cases:
        with pytest.raises(ProofError, match=message):
            merkle.verify_consistency(0, 0, proof, root1, root2)


def test_errors_carry_the_numbers():
    proof = merkle.inclusion_proof(5, 8, merkle.subtree_hasher(LEAF_HASHES))
    with pytest.raises(ProofError, match="has 2 hashes, want 3"):
        merkle.verify_inclusion(LEAF_HASHES[5], 5, 8, proof[:2], ROOTS[7])
    with pytest.raises(ProofError, match="leaf index 8 is not in a tree of size 8"):
        merkle.verify_inclusion(LEAF_HASHES[5], 8, 8, proof, ROOTS[7])
    with pytest.raises(ProofError, match="hash 1 has 31 bytes, want 32"):
        merkle.verify_inclusion(LEAF_HASHES[5], 5, 8, [proof[0], proof[1][:31], proof[2]], ROOTS[7])
    with pytest.raises(ProofError, match="consistency proof from size 6 to 8 has 4 hashes, want 3"):
        merkle.verify_consistency(6, 8, [*CONSISTENCY_VECTORS[2][2], EMPTY], ROOTS[5], ROOTS[7])
    with pytest.raises(ProofError, match="root is str, want 32 bytes"):
        merkle.verify_inclusion(LEAF_HASHES[0], 0, 1, [], "x" * 32)
    with pytest.raises(ProofError, match="leaf index is float, want an integer"):
        merkle.verify_inclusion(LEAF_HASHES[0], 0.0, 1, [], ROOTS[0])
    with pytest.raises(ProofError, match="tree size is bool"):
        merkle.verify_inclusion(LEAF_HASHES[0], 0, True, [], ROOTS[0])
    with pytest.raises(ProofError, match="old tree size is -1, want 0 or more"):
        merkle.verify_consistency(-1, 3, [], ROOTS[0], ROOTS[2])
    with pytest.raises(ProofError, match="consistency proof from size 1 to 3 is NoneType, want a list"):
        merkle.verify_consistency(1, 3, None, ROOTS[0], ROOTS[2])
    with pytest.raises(ProofError, match="inclusion proof for leaf 0 of 2 is bytes, want a list"):
        merkle.verify_inclusion(LEAF_HASHES[0], 0, 2, LEAF_HASHES[1], ROOTS[1])


def _random_leaves(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(0, 40)) for _ in range(n)]


def test_proofs_match_the_naive_definitions_for_all_sizes_to_70():
    entries = _random_leaves(70, 1)
    hashes = [merkle.leaf_hash(e) for e in entries]
    provider = merkle.subtree_hasher(hashes)
    rng = random.Random(2)
    for size in range(1, 71):
        root = naive.mth(entries[:size])
        assert merkle.root_from_leaf_hashes(hashes[:size]) == root
        for index in rng.sample(range(size), min(size, 6)):
            assert merkle.inclusion_proof(index, size, provider) == naive.path(index, entries[:size])
        for size1 in rng.sample(range(1, size + 1), min(size, 6)):
            assert merkle.consistency_proof(size1, size, provider) == naive.proof(size1, entries[:size])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_property_valid_proofs_verify_and_one_bit_off_does_not(data):
    size = data.draw(st.integers(1, 300), label="size")
    hashes = [merkle.leaf_hash(i.to_bytes(4, "big")) for i in range(size)]
    provider = merkle.subtree_hasher(hashes)
    root = merkle.root_from_leaf_hashes(hashes)
    index = data.draw(st.integers(0, size - 1), label="index")
    proof = merkle.inclusion_proof(index, size, provider)
    assert len(proof) <= 2 * size.bit_length()
    merkle.verify_inclusion(hashes[index], index, size, proof, root)
    if proof:
        i = data.draw(st.integers(0, len(proof) - 1), label="element")
        bit = data.draw(st.integers(0, 255), label="bit")
        bad = list(proof)
        bad[i] = _flip(bad[i], bit)
        with pytest.raises(ProofError):
            merkle.verify_inclusion(hashes[index], index, size, bad, root)
    size1 = data.draw(st.integers(1, size), label="size1")
    root1 = merkle.root_from_leaf_hashes(hashes[:size1])
    cproof = merkle.consistency_proof(size1, size, provider)
    merkle.verify_consistency(size1, size, cproof, root1, root)
    if cproof:
        with pytest.raises(ProofError):
            merkle.verify_consistency(size1, size, cproof[:-1], root1, root)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 2**40), st.data())
def test_property_paths_are_well_formed_for_huge_trees(size, data):
    index = data.draw(st.integers(0, size - 1))
    ranges = merkle.inclusion_path(index, size)
    covered = sorted(ranges + [(index, index + 1)])
    # The path's ranges and the leaf tile [0, size) with no gap or overlap.
    assert covered[0][0] == 0 and covered[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))
    size1 = data.draw(st.integers(1, size))
    for a, b in merkle.consistency_path(size1, size):
        assert 0 <= a < b <= size


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=20), min_size=1, max_size=40))
def test_property_root_matches_naive(entries):
    assert merkle.root_from_leaf_hashes([merkle.leaf_hash(e) for e in entries]) == naive.mth(entries)
