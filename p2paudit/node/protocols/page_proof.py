"""Range proofs of history sync: which tree nodes prove a page, and the root a page and its proof give.

A page is entries [start, end) of a tree of `size` leaves plus a compact-range proof: the hashes of the
RFC 9162 tree's nodes that lie wholly left of the range, then those wholly right of it, in tree order.
Which nodes they are (range_proof_ranges) is separate from hashing them, as in ledger.merkle. Pure: no
store, no I/O (protocols.sync serves and checks pages with these).
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger import Checkpoint
from ledger.merkle import leaf_hash, node_hash, root_from_leaf_hashes, split_point
from p2paudit.errors import InputError
from p2paudit.node.wire import RangeProof

Range = tuple[int, int]


class PageProofError(InputError):
    """A sync page is not the positions it claims under the peer's checkpoint (exit code 2): a bad peer."""


# -- which nodes make a range proof --------------------------------------------------------------------------


def range_proof_ranges(start: int, end: int, size: int) -> tuple[list[Range], list[Range]]:
    """The tree nodes wholly left of, and wholly right of, [start, end) in the tree of `size` leaves, left to right.

    Precondition: 0 <= start < end <= size. Only nodes that straddle the range
    are split, so each side has at most log2(size) + 1 nodes.
    """
    left: list[Range] = []
    right: list[Range] = []

    def walk(lo: int, hi: int) -> None:
        if hi <= start:
            left.append((lo, hi))
        elif lo >= end:
            right.append((lo, hi))
        elif not (start <= lo and hi <= end):
            k = split_point(hi - lo)
            walk(lo, lo + k)
            walk(lo + k, hi)

    walk(0, size)
    return left, right


def root_from_range(start: int, leaf_hashes: Sequence[bytes], size: int, proof: RangeProof) -> bytes:
    """The root of the tree of `size` leaves with `leaf_hashes` at start.., given the nodes around them."""
    end = start + len(leaf_hashes)
    left_ranges, right_ranges = range_proof_ranges(start, end, size)
    outside = iter(list(proof.left) + list(proof.right))
    if (len(proof.left), len(proof.right)) != (len(left_ranges), len(right_ranges)):
        raise PageProofError(
            f"page proof for [{start}, {end}) of {size} has {len(proof.left)} left and {len(proof.right)} right "
            f"hashes, want {len(left_ranges)} and {len(right_ranges)}"
        )

    def root(lo: int, hi: int) -> bytes:
        if hi <= start or lo >= end:
            return next(outside)
        if start <= lo and hi <= end:
            return root_from_leaf_hashes(leaf_hashes[lo - start : hi - start])
        k = split_point(hi - lo)
        return node_hash(root(lo, lo + k), root(lo + k, hi))

    return root(0, size)


def verify_page(checkpoint: Checkpoint, start: int, entries: Sequence[bytes], proof: RangeProof) -> list[bytes]:
    """Prove `entries` are positions start.. of the tree under `checkpoint` (already verified); return them.

    Raises PageProofError with the numbers on any mismatch.
    """
    if type(start) is not int or not entries or start < 0 or start + len(entries) > checkpoint.size:
        raise PageProofError(
            f"page [{start}, {start + len(entries) if type(start) is int else '?'}) of {len(entries)} entries "
            f"is not within the checkpoint's tree of size {checkpoint.size}"
        )
    hashes = [leaf_hash(bytes(entry)) for entry in entries]
    root = root_from_range(start, hashes, checkpoint.size, proof)
    if root != checkpoint.root:
        raise PageProofError(
            f"page [{start}, {start + len(entries)}) gives root {root.hex()[:16]}.., the checkpoint of size "
            f"{checkpoint.size} has {checkpoint.root.hex()[:16]}.."
        )
    return list(entries)
