"""A naive, obviously-right RFC 9162 reference for the tests: the recursive definitions, straight from the RFC text.

Independent of ledger.merkle (it uses hashlib directly), so the tests compare
two implementations instead of one with itself.
"""

from __future__ import annotations

import hashlib


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def mth(entries: list[bytes]) -> bytes:
    """MTH(D[n]) of the entries themselves (not their hashes), section 2.1.1."""
    n = len(entries)
    if n == 0:
        return sha(b"")
    if n == 1:
        return sha(b"\x00" + entries[0])
    k = 1
    while k * 2 < n:
        k *= 2
    return sha(b"\x01" + mth(entries[:k]) + mth(entries[k:]))


def path(m: int, entries: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]), section 2.1.3.1."""
    n = len(entries)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return path(m, entries[:k]) + [mth(entries[k:])]
    return path(m - k, entries[k:]) + [mth(entries[:k])]


def subproof(m: int, entries: list[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b), section 2.1.4.1."""
    n = len(entries)
    if m == n:
        return [] if b else [mth(entries)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return subproof(m, entries[:k], b) + [mth(entries[k:])]
    return subproof(m - k, entries[k:], False) + [mth(entries[:k])]


def proof(m: int, entries: list[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) for 0 < m < n; empty for m == 0 or m == n (nothing to prove)."""
    if m == 0 or m == len(entries):
        return []
    return subproof(m, entries, True)
