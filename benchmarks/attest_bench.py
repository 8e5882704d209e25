"""Appending signed attestations to the store at scale, and the ledger's size per attestation.

Fills a fresh ledger to --fill entries with pre-made signed attestations
(batched appends through AttestationStore, so every one is checked and
indexed), then times --timed further pre-made attestations appended in
batches of --batch: decoding, signature check, run check, dedupe lookup,
Merkle leaf and node rows, index rows, one fsync'd commit per batch.

Baselines measured in the same run, on the same bytes: the signature check
alone, and the bare ledger (ledger.Ledger.append_many, no checks, no index)
appending the same batches to a ledger of the same size.

    python benchmarks/attest_bench.py            # 1,000,000 entries (several minutes)
    python benchmarks/attest_bench.py --quick    # 20,000 entries
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

# Run as a script from anywhere: the repository root first, so `ledger` is the package here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthetic_attestations import synthetic_attestation  # noqa: E402

from ledger import Ledger  # noqa: E402
from p2paudit.attest.record import DOMAIN, SignedAttestation  # noqa: E402
from p2paudit.attest.store import AttestationStore, origin_for  # noqa: E402
from p2paudit.identity import Identity, identity_from_seed, verify_signature  # noqa: E402

RUN = hashlib.sha256(b"benchmark run").digest()
KEYS = 16  # verifiers; attestation n is key n % KEYS on step n // KEYS


def make_keys() -> list[Identity]:
    return [identity_from_seed(hashlib.sha256(b"bench key %d" % k).digest()) for k in range(KEYS)]


def make_attestations(keys: list[Identity], start: int, count: int) -> list[SignedAttestation]:
    """Signed attestations number start..start+count-1 (distinct steps/keys, a few mismatches and errors)."""
    out = []
    for n in range(start, start + count):
        identity, step = keys[n % KEYS], n // KEYS
        out.append(synthetic_attestation(identity, RUN, step, n))
    return out


def fill(store: AttestationStore, keys: list[Identity], total: int, batch: int) -> float:
    """Append attestations 0..total-1 in batches; return the seconds spent appending (signing excluded)."""
    spent, done, chunk = 0.0, 0, 20_000
    while done < total:
        items = [s.encoded for s in make_attestations(keys, done, min(chunk, total - done))]
        began = time.perf_counter()
        for at in range(0, len(items), batch):
            store.append_many(items[at : at + batch])
        spent += time.perf_counter() - began
        done += len(items)
        if done % 100_000 == 0 or done == total:
            print(f"  filled {done:>9,} entries, {done / spent:,.0f}/s appending so far", flush=True)
    return spent


def time_store(store: AttestationStore, items: list[bytes], batch: int) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds): the machine is shared, so CPU time is the one-core figure."""
    began, cpu = time.perf_counter(), time.process_time()
    for at in range(0, len(items), batch):
        store.append_many(items[at : at + batch])
    return time.perf_counter() - began, time.process_time() - cpu


def time_bare_ledger(path: Path, origin: str, items: list[bytes], batch: int) -> float:
    """The same batches through the bare ledger (no checks, no index), on a copy of the filled file."""
    with Ledger.open(path, origin) as bare:
        began, cpu = time.perf_counter(), time.process_time()
        for at in range(0, len(items), batch):
            bare.append_many(items[at : at + batch])
        return time.perf_counter() - began, time.process_time() - cpu


def time_verify(signed: list[SignedAttestation]) -> tuple[float, float]:
    began, cpu = time.perf_counter(), time.process_time()
    for s in signed:
        if not verify_signature(s.verifier, s.signature, DOMAIN + s.body):
            raise SystemExit("a pre-made signature did not verify")
    return time.perf_counter() - began, time.process_time() - cpu


def time_queries(store: AttestationStore) -> dict[str, float]:
    """Seconds for the ledger CLI's queries on the full store (one run of each)."""
    from p2paudit.attest import queries

    trusted = frozenset(k.public_key for k in make_keys()[:4])
    jobs = {
        "coverage, all keys": lambda: queries.coverage(store, RUN, None, 2),
        "coverage, 4 trusted keys": lambda: queries.coverage(store, RUN, trusted, 2),
        "disputes": lambda: queries.disputes(store, RUN),
        "equivocations": lambda: queries.equivocations(store),
    }
    out = {}
    for name, job in jobs.items():
        began = time.perf_counter()
        job()
        out[name] = time.perf_counter() - began
    return out


def database_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def table_bytes(path: Path) -> dict[str, int]:
    """Bytes per table and index (SQLite's dbstat), or {} where dbstat is not compiled in."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    except sqlite3.OperationalError:
        rows = []
    conn.close()
    return dict(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fill to 20,000 and time 5,000")
    parser.add_argument("--fill", type=int, default=1_000_000)
    parser.add_argument("--timed", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to put the ledger (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.fill, args.timed = 20_000, 5_000
    workdir = Path(tempfile.mkdtemp(prefix="attest_bench_", dir=args.dir))
    try:
        run(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(args: argparse.Namespace, workdir: Path) -> None:
    keys = make_keys()
    path = workdir / "ledger.db"
    origin = origin_for(keys[0].public_key)
    steps = (args.fill + args.timed) // KEYS + 1
    print(
        f"attest_bench: fill {args.fill:,}, time {args.timed:,} in batches of {args.batch:,}, "
        f"{KEYS} keys, 1 process (pid {os.getpid()}), ledger {path}"
    )
    with AttestationStore.open(path, origin) as store:
        store.register_run(RUN, steps, "benchmark")
        fill_seconds = fill(store, keys, args.fill, args.batch)
    size_bytes = database_bytes(path)
    per_table = table_bytes(path)
    timed = make_attestations(keys, args.fill, args.timed)  # pre-made: signing is not timed
    items = [s.encoded for s in timed]
    bare_path = workdir / "bare.db"
    for suffix in ("", "-wal"):
        if Path(str(path) + suffix).exists():
            shutil.copyfile(str(path) + suffix, str(bare_path) + suffix)
    verify_t = time_verify(timed)
    bare_t = time_bare_ledger(bare_path, origin, items, args.batch)
    with AttestationStore.open(path) as store:
        store_t = time_store(store, items, args.batch)
        final_size = store.ledger.size
        query_t = time_queries(store)
    load = os.getloadavg()[0]
    print(f"fill: {args.fill:,} appended at {args.fill / fill_seconds:,.0f}/s (wall)")
    print(
        f"ledger size at {args.fill:,} entries: {size_bytes:,} bytes = {size_bytes / args.fill:,.0f} bytes per "
        f"attestation (signed attestation itself: {len(items[0])} bytes)"
    )
    for name, nbytes in per_table.items():
        if nbytes / args.fill >= 0.5:
            print(f"  {name:<16} {nbytes / args.fill:>7.1f} bytes per attestation")
    print(
        f"timed appends at {args.fill:,} -> {final_size:,} entries (load average {load:.1f} on {os.cpu_count()} CPUs):"
    )
    print("                                         wall/s     CPU/s   (CPU/s = per second of one core)")
    rows = [
        ("store (decode, verify, check, index)", store_t),
        ("baseline: bare ledger append", bare_t),
        ("baseline: signature check alone", verify_t),
    ]
    rates = {name: (args.timed / wall, args.timed / cpu) for name, (wall, cpu) in rows}
    for name, (wall, cpu) in rates.items():
        print(f"  {name:<37} {wall:>8,.0f}  {cpu:>8,.0f}")
    store_wall, store_cpu = rates[rows[0][0]]
    print(
        f"  store / bare ledger (CPU): {store_cpu / rates[rows[1][0]][1]:.2f}; "
        f"store / signature check (CPU): {store_cpu / rates[rows[2][0]][1]:.2f}"
    )
    print(
        f"  target >= 5,000/s on one core: {'met' if store_cpu >= 5000 else 'NOT met'} (CPU), "
        f"{'met' if store_wall >= 5000 else 'not met'} (wall, shared machine)"
    )
    print(f"queries at {final_size:,} entries (wall seconds):")
    for name, seconds in query_t.items():
        print(f"  {name:<37} {seconds:>8.2f}")


if __name__ == "__main__":
    main()
