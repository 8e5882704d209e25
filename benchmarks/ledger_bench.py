"""Ledger speed: fill to 1M entries, sustained batched appends, proof build/verify at 1M, bytes per entry.

Every figure comes with a baseline measured in the same run:
  appends  vs  the same rows inserted by executemany into a plain SQLite table (same pragmas, no hashing, no triggers)
  proofs   vs  one primary-key read of an entry (the floor for anything read from the database)
  verify   vs  one SHA-256 of a 65-byte node preimage

    python benchmarks/ledger_bench.py            # 1,000,000 entries
    python benchmarks/ledger_bench.py --quick    # 100,000 entries, fewer samples
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Run from a checkout: the repository root first, so `ledger` is this tree's package even where an
# editable install predates ledger/__init__.py (it then maps `ledger` to an empty namespace package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledger import Ledger, merkle  # noqa: E402

ENTRY_BYTES = 300


def make_entry(i: int) -> bytes:
    """A ~300-byte entry, different for every index (roughly the size of a signed attestation)."""
    seed = hashlib.sha256(i.to_bytes(8, "little")).digest()
    return (seed * 10)[:ENTRY_BYTES]


def timed(fn: Callable[[], object], samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def summary(times: list[float]) -> tuple[float, float]:
    """(median, p99) in milliseconds."""
    ordered = sorted(times)
    return statistics.median(ordered) * 1e3, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3


def fill(lg: Ledger, n: int, batch: int) -> float:
    t0 = time.perf_counter()
    for start in range(lg.size, n, batch):
        lg.append_many([make_entry(i) for i in range(start, min(n, start + batch))])
    return time.perf_counter() - t0


def plain_insert_rate(directory: Path, start: int, batches: int, batch: int) -> float:
    """Entries/s for the same rows in a plain table: the cost of SQLite alone."""
    conn = sqlite3.connect(directory / "plain.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (idx INTEGER PRIMARY KEY, data BLOB NOT NULL)")
    t0 = time.perf_counter()
    for b in range(batches):
        first = start + b * batch
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, make_entry(i)) for i in range(first, first + batch)])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return batches * batch / elapsed


def sustained_rate(lg: Ledger, batches: int, batch: int) -> float:
    start = lg.size
    t0 = time.perf_counter()
    for b in range(batches):
        first = start + b * batch
        lg.append_many([make_entry(i) for i in range(first, first + batch)])
    return batches * batch / (time.perf_counter() - t0)


def bench_proofs(lg: Ledger, samples: int, rng: random.Random) -> None:
    size = lg.size
    root = lg.root()
    read = timed(
        lambda: lg.conn.execute("SELECT data FROM entries WHERE idx = ?", (rng.randrange(size),)).fetchone(), samples
    )
    read_med, _ = summary(read)
    print(f"  baseline: one entry read by primary key     median {read_med * 1e3:7.1f} us")

    cases = [(rng.randrange(size), rng.randrange(1, size)) for _ in range(samples)]
    incl, cons, v_incl, v_cons = [], [], [], []
    roots: dict[int, bytes] = {}
    for index, old in cases:
        t0 = time.perf_counter()
        proof = lg.inclusion_proof(index)
        incl.append(time.perf_counter() - t0)
        leaf = merkle.leaf_hash(make_entry(index))
        t0 = time.perf_counter()
        merkle.verify_inclusion(leaf, index, size, proof, root)
        v_incl.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cproof = lg.consistency_proof(old)
        cons.append(time.perf_counter() - t0)
        old_root = roots.setdefault(old, lg.root(old))
        t0 = time.perf_counter()
        merkle.verify_consistency(old, size, cproof, old_root, root)
        v_cons.append(time.perf_counter() - t0)
    node = bytes(65)
    sha_med, _ = summary(timed(lambda: hashlib.sha256(node).digest(), samples))
    for name, times, base, target in [
        ("inclusion proof build", incl, read_med, 1.0),
        ("consistency proof build", cons, read_med, 1.0),
        ("inclusion proof verify", v_incl, sha_med, 0.2),
        ("consistency proof verify", v_cons, sha_med, 0.2),
    ]:
        med, p99 = summary(times)
        print(
            f"  {name:26s} median {med:.3f} ms  p99 {p99:.3f} ms  ({med / base:5.1f}x baseline; target < {target} ms)"
        )
    print(f"  baseline: one SHA-256 of 65 bytes          median {sha_med * 1e3:7.2f} us")
    busy = [bytes(65)] * 200
    noise_med, noise_p99 = summary(timed(lambda: [hashlib.sha256(b).digest() for b in busy], samples))
    print(f"  machine noise: a CPU-only loop of 200 SHA-256  median {noise_med:.3f} ms  p99 {noise_p99:.3f} ms")
    t0 = time.perf_counter()
    for old in rng.sample(range(1, size), 200):
        lg.root(old)
    print(f"  root at a past size                        mean   {(time.perf_counter() - t0) / 200 * 1e3:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100k entries and fewer samples")
    parser.add_argument("--entries", type=int, default=None, help="fill size (default 1,000,000; 100,000 with --quick)")
    parser.add_argument("--dir", default=None, help="where to put the database (default: a temporary directory)")
    parser.add_argument("--skip-verify", action="store_true", help="skip the full Ledger.verify() pass")
    args = parser.parse_args()
    n = args.entries or (100_000 if args.quick else 1_000_000)
    samples = 300 if args.quick else 2000
    rng = random.Random(1)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        with Ledger.open(directory / "bench.db", "bench.example/log") as lg:
            print(f"ledger_bench: {n:,} entries of {ENTRY_BYTES} bytes (cpu count {os.cpu_count()})")
            seconds = fill(lg, n, 10_000)
            print(f"  fill to {n:,} with append_many(10,000)     {seconds:.1f} s  ({n / seconds:,.0f} entries/s)")
            for batch, batches in [(100, 20 if args.quick else 100), (1000, 5 if args.quick else 20)]:
                plain = plain_insert_rate(directory, lg.size, batches, batch)
                rate = sustained_rate(lg, batches, batch)
                print(
                    f"  sustained appends, batches of {batch:5d}      {rate:9,.0f} entries/s  "
                    f"(plain SQLite insert {plain:9,.0f}/s; ratio {rate / plain:.2f})"
                )
            single = timed(lambda: lg.append(make_entry(lg.size)), 50 if args.quick else 200)
            med, p99 = summary(single)
            print(f"  single append (one fsync'd transaction)    median {med:.2f} ms  p99 {p99:.2f} ms")
            bench_proofs(lg, samples, rng)
            lg.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            size = lg.size
            if not args.skip_verify:
                t0 = time.perf_counter()
                report = lg.verify()
                print(
                    f"  full verify() of {size:,} entries          {time.perf_counter() - t0:.1f} s  (ok={report.ok})"
                )
        disk = sum(p.stat().st_size for p in directory.glob("bench.db*"))
        print(
            f"  on disk: {disk / size:.1f} bytes per entry ({disk / size - ENTRY_BYTES:.1f} beyond the {ENTRY_BYTES}-byte payload)"
        )


if __name__ == "__main__":
    main()
