"""RFC 9162 Merkle tree hashing, proof generation and proof verification (pure: bytes in, bytes out).

Vocabulary: a tree of `size` leaves covers leaf indices [0, size). A range
[start, end) names the subtree the RFC's MTH(D[start:end]) hashes. Proof
*generation* is split in two: `inclusion_path` / `consistency_path` say which
ranges make a proof (no hashing at all), and `inclusion_proof` /
`consistency_proof` turn those ranges into hashes through a `SubtreeHash`
provider (a callable giving the hash of [start, end)), so a store can serve it
from stored interior hashes in O(log n) reads. *Verification* takes values only
and follows RFC 9162 sections 2.1.3.2 and 2.1.4.2 step by step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from ledger.errors import ProofError

HASH_SIZE = 32
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
EMPTY_ROOT = hashlib.sha256(b"").digest()  # MTH({}) = HASH() (RFC 9162 section 2.1.1)

Range = tuple[int, int]
SubtreeHash = Callable[[int, int], bytes]
"""Hash of the leaves in [start, end): MTH(D[start:end]) in RFC 9162 terms."""


def leaf_hash(entry: bytes) -> bytes:
    """SHA-256(0x00 || entry): the hash of one leaf."""
    return hashlib.sha256(LEAF_PREFIX + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): the hash of an interior node."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def split_point(n: int) -> int:
    """The largest power of two strictly less than n (the RFC's k). Precondition: n >= 2."""
    return 1 << ((n - 1).bit_length() - 1)


def is_complete(start: int, end: int) -> bool:
    """True when [start, end) is a complete aligned subtree: a power-of-two width starting at a multiple of it."""
    width = end - start
    return width > 0 and width & (width - 1) == 0 and start % width == 0


def check_hash(value: bytes, what: str) -> None:
    """Raise ProofError unless `value` is a 32-byte `bytes` object."""
    if not isinstance(value, (bytes, bytearray)):
        raise ProofError(f"{what} is {type(value).__name__}, want {HASH_SIZE} bytes")
    if len(value) != HASH_SIZE:
        raise ProofError(f"{what} has {len(value)} bytes, want {HASH_SIZE}")


def check_size(value: int, what: str) -> None:
    """Raise ProofError unless `value` is a non-negative int (bool is not a size)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProofError(f"{what} is {type(value).__name__}, want an integer")
    if value < 0:
        raise ProofError(f"{what} is {value}, want 0 or more")


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """MTH over the given leaf hashes (each 32 bytes); EMPTY_ROOT for none.

    Streams over the hashes with a stack of complete subtrees (the "compact
    range" of the prefix read so far), so memory is O(log n).
    """
    stack: list[tuple[bytes, int]] = []  # (hash, width) of complete subtrees, widths strictly decreasing
    for i, h in enumerate(hashes):
        check_hash(h, f"leaf hash {i}")
        item = (bytes(h), 1)
        while stack and stack[-1][1] == item[1]:
            left = stack.pop()
            item = (node_hash(left[0], item[0]), item[1] * 2)
        stack.append(item)
    return fold_compact_range([h for h, _ in stack])


def push_leaf(frontier: list[tuple[int, bytes]], size: int, leaf: bytes) -> list[tuple[int, int, bytes]]:
    """Add leaf number `size` to a tree's right edge; return the interior nodes it completes.

    `frontier` is the compact range of the tree of `size` leaves: (level, hash)
    of its complete subtrees, left to right, levels strictly decreasing; it is
    updated in place. Each completed node is (level, idx, hash), covering
    leaves [idx * 2^level, (idx + 1) * 2^level), lowest level first.
    """
    completed: list[tuple[int, int, bytes]] = []
    level, acc, new_size = 0, leaf, size + 1
    while frontier and frontier[-1][0] == level:
        acc = node_hash(frontier.pop()[1], acc)
        level += 1
        completed.append((level, (new_size >> level) - 1, acc))
    frontier.append((level, acc))
    return completed


def compact_ranges(size: int) -> list[Range]:
    """The complete subtrees that make a tree of `size` leaves, left to right (one per set bit of size)."""
    ranges: list[Range] = []
    start = 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            ranges.append((start, start + (1 << level)))
            start += 1 << level
    return ranges


def fold_compact_range(hashes: Sequence[bytes]) -> bytes:
    """Root of a tree given the hashes of its complete subtrees, left to right with decreasing widths.

    The RFC splits at the largest power of two below n, which is exactly the
    leftmost complete subtree, so the root is a right fold.
    """
    if not hashes:
        return EMPTY_ROOT
    acc = hashes[-1]
    for h in reversed(hashes[:-1]):
        acc = node_hash(h, acc)
    return acc


def range_hash(start: int, end: int, complete_hash: SubtreeHash) -> bytes:
    """MTH(D[start:end]) built from `complete_hash`, which is only asked for complete aligned subtrees.

    Precondition: 0 <= start < end. For the ranges that appear in proofs and
    roots (start aligned to the range's leading power of two) this asks for
    O(log n) subtrees.
    """
    if is_complete(start, end):
        return complete_hash(start, end)
    k = split_point(end - start)
    return node_hash(range_hash(start, start + k, complete_hash), range_hash(start + k, end, complete_hash))


def complete_subtrees(start: int, end: int) -> list[Range]:
    """The complete aligned subtrees `range_hash(start, end, ...)` asks for, left to right. Precondition: start < end."""
    if is_complete(start, end):
        return [(start, end)]
    k = split_point(end - start)
    return complete_subtrees(start, start + k) + complete_subtrees(start + k, end)


def subtree_hasher(leaf_hashes: Sequence[bytes]) -> SubtreeHash:
    """An in-memory SubtreeHash over a list of leaf hashes (the naive reference provider)."""

    def hash_of(start: int, end: int) -> bytes:
        return root_from_leaf_hashes(leaf_hashes[start:end])

    return hash_of


def inclusion_path(index: int, size: int) -> list[Range]:
    """The ranges whose hashes make the inclusion proof of leaf `index` in a tree of `size` leaves.

    RFC 9162 PATH(m, D[n]), bottom-up (the order the proof lists them).
    Precondition: 0 <= index < size, else ProofError.
    """
    check_size(index, "leaf index")
    check_size(size, "tree size")
    if not index < size:
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    path: list[Range] = []
    start, end = 0, size
    while end - start > 1:
        mid = start + split_point(end - start)
        if index < mid:
            path.append((mid, end))
            end = mid
        else:
            path.append((start, mid))
            start = mid
    path.reverse()
    return path


def consistency_path(size1: int, size2: int) -> list[Range]:
    """The ranges whose hashes make the consistency proof from `size1` to `size2`.

    RFC 9162 PROOF(m, D[n]) = SUBPROOF(m, D[n], true), bottom-up, defined for
    0 < m <= n; empty when size1 equals size2 (0 -> 0 included). As in
    transparency-dev/merkle, there is no proof from the empty tree to a larger
    one: every tree extends it, so such a proof would prove nothing.
    Precondition: size1 == size2, or 0 < size1 < size2; else ProofError.
    """
    check_size(size1, "old tree size")
    check_size(size2, "new tree size")
    if not size1 <= size2:
        raise ProofError(f"no consistency proof from size {size1} to size {size2}")
    if size1 == size2:
        return []
    if size1 == 0:
        raise ProofError(f"no consistency proof from the empty tree to size {size2}: it would prove nothing")
    path: list[Range] = []
    start, end, m, whole_old_tree = 0, size2, size1, True
    while m != end - start:
        k = split_point(end - start)
        if m <= k:
            path.append((start + k, end))
            end = start + k
        else:
            path.append((start, start + k))
            start, m, whole_old_tree = start + k, m - k, False
    if not whole_old_tree:  # SUBPROOF(m, D[m], false) = {MTH(D[m])}
        path.append((start, end))
    path.reverse()
    return path


def inclusion_proof(index: int, size: int, subtree_hash: SubtreeHash) -> list[bytes]:
    """The inclusion proof of leaf `index` in a tree of `size` leaves, hashed through `subtree_hash`."""
    return [subtree_hash(a, b) for a, b in inclusion_path(index, size)]


def consistency_proof(size1: int, size2: int, subtree_hash: SubtreeHash) -> list[bytes]:
    """The consistency proof from `size1` to `size2`, hashed through `subtree_hash`."""
    return [subtree_hash(a, b) for a, b in consistency_path(size1, size2)]


def _check_proof_hashes(proof: Sequence[bytes], want: int, what: str) -> None:
    if not isinstance(proof, (list, tuple)):
        raise ProofError(f"{what} is {type(proof).__name__}, want a list of {HASH_SIZE}-byte hashes")
    if len(proof) != want:
        raise ProofError(f"{what} has {len(proof)} hashes, want {want}")
    for i, h in enumerate(proof):
        check_hash(h, f"{what} hash {i}")


def _short(h: bytes) -> str:
    return bytes(h).hex()[:16]


def verify_inclusion(leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """Check that the leaf with hash `leaf_hash` is at `index` in the tree of `size` leaves with `root`.

    Raises ProofError (with the numbers) on any malformed input or mismatch;
    returns None when the proof holds. RFC 9162 section 2.1.3.2.
    """
    check_hash(leaf_hash, "leaf hash")
    check_hash(root, "root")
    check_size(index, "leaf index")
    check_size(size, "tree size")
    if not index < size:  # step 1
        raise ProofError(f"leaf index {index} is not in a tree of size {size}")
    _check_proof_hashes(proof, len(inclusion_path(index, size)), f"inclusion proof for leaf {index} of {size}")
    fn, sn, r = index, size - 1, bytes(leaf_hash)  # steps 2 and 3
    for p in proof:  # step 4
        if sn == 0:
            raise ProofError(f"inclusion proof for leaf {index} of {size} is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:  # step 5
        raise ProofError(f"inclusion proof for leaf {index} of {size} is too short")
    if r != root:
        raise ProofError(f"inclusion proof for leaf {index} of {size} gives root {_short(r)}.., want {_short(root)}..")


def verify_consistency(size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes) -> None:
    """Check that the tree of `size1` leaves with `root1` is a prefix of the tree of `size2` with `root2`.

    As transparency-dev/merkle's VerifyConsistency: size1 == size2 needs an
    empty proof and equal roots (for size 0 both must be EMPTY_ROOT, which
    transparency-dev leaves to the caller); a proof from size 0 to a larger
    size is refused, since every tree extends the empty one (a caller that
    holds only the empty tree accepts the larger head on its own terms, as
    ledger.peers does). Raises ProofError with the numbers; returns None when
    the proof holds. RFC 9162 section 2.1.4.2.
    """
    check_hash(root1, "old root")
    check_hash(root2, "new root")
    check_size(size1, "old tree size")
    check_size(size2, "new tree size")
    what = f"consistency proof from size {size1} to {size2}"
    if not size1 <= size2:
        raise ProofError(f"no consistency proof from size {size1} to size {size2}")
    if size1 == 0 and size2 > 0:
        raise ProofError(f"{what} refused: a proof from the empty tree is meaningless")
    _check_proof_hashes(proof, len(consistency_path(size1, size2)), what)
    if size1 == size2:
        if root1 != root2:
            raise ProofError(f"{what}: old root {_short(root1)}.. differs from new root {_short(root2)}..")
        if size1 == 0 and root1 != EMPTY_ROOT:
            raise ProofError(f"{what}: root {_short(root1)}.. is not the empty tree's {_short(EMPTY_ROOT)}..")
        return
    path = list(proof)
    if size1 & (size1 - 1) == 0:  # step 2: first is a power of two, so its root is the first node
        path.insert(0, bytes(root1))
    fn, sn = size1 - 1, size2 - 1  # step 3
    while fn & 1:  # step 4
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]  # step 5
    for c in path[1:]:  # step 6
        if sn == 0:
            raise ProofError(f"{what} is too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:  # step 7
        raise ProofError(f"{what} is too short")
    if fr != root1:
        raise ProofError(f"{what} gives old root {_short(fr)}.., want {_short(root1)}..")
    if sr != root2:
        raise ProofError(f"{what} gives new root {_short(sr)}.., want {_short(root2)}..")
