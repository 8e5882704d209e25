"""Fuzz a `p2paudit daemon` process on every protocol it offers, at length (the harness of tests/node/test_fuzz.py).

One daemon on 127.0.0.1 (p2paudit.node.localnet, a tiny published run) gets --per-protocol inputs on each
protocol of tests/node/fuzz_peer.py (gossipsub on /meshsub/1.0.0, 1.1.0, 1.2.0; sync, witness, peer
exchange, settled; Kademlia; identify and identify push; ping; raw TCP: multistream-select, the Noise
handshake's messages and payload, yamux frames), from fresh Ed25519 identities, one at a time, each
followed by a ping. A daemon that exits or stops answering is restarted and the finding kept (its last
inputs replayed alone to find the culprit). An honest node asks for the signed sync status and publishes
an attestation every few seconds, and checks it is stored.

Printed: per protocol the inputs sent, inputs/s and outcomes; daemon exits and wedges with their cause,
the reproducing input (hex) and the daemon's log tail; each daemon process's resident memory before
fuzzing, its peak (VmHWM) and its last VmRSS; how often the honest node was served during and after.
Figures only: nothing here asserts on time. Every input and its outcome is recorded in
WORK/fuzz-inputs.jsonl (findings in WORK/fuzz-findings.json); --replay sends such a file again.

    python benchmarks/fuzz_bench.py                          # 10,000 inputs per protocol (about 30 min)
    python benchmarks/fuzz_bench.py --per-protocol 500 --protocols /meshsub/1.1.0,yamux
    python benchmarks/fuzz_bench.py --replay /tmp/x/fuzz-inputs.jsonl --protocols tcp
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

# Run as a script from anywhere: the repository root first, then the harness beside the node tests.
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "node")]

import trio  # noqa: E402
from fuzz_inputs import ALL_PROTOCOLS, load_cases  # noqa: E402
from fuzz_peer import fuzz_daemon  # noqa: E402
from fuzz_report import FuzzConfig  # noqa: E402

from p2paudit.identity import identity_from_seed  # noqa: E402
from p2paudit.run.publisher import TrainPlan, publish_run  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-protocol", type=int, default=10_000, help="inputs per protocol")
    parser.add_argument("--seed", type=int, default=0, help="the inputs are a pure function of it")
    parser.add_argument("--protocols", default=",".join(ALL_PROTOCOLS), help="comma-separated (default: all)")
    parser.add_argument("--max-findings", type=int, default=50, help="per protocol, then its other inputs are skipped")
    parser.add_argument("--confirm", type=int, default=8, help="suspects replayed alone per finding")
    parser.add_argument("--run", type=Path, default=None, help="a published run (default: publish a tiny one)")
    parser.add_argument("--work", type=Path, default=None, help="where the daemon, records and findings go")
    parser.add_argument("--replay", type=Path, default=None, help="send the inputs recorded in this file instead")
    parser.add_argument("--verbose", action="store_true", help="show py-libp2p's own warnings on this side")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if not args.verbose:  # our fuzz hosts' library chatter ("Failed to open stream ...") says nothing here
        logging.getLogger("libp2p").setLevel(logging.CRITICAL)
    work = args.work or Path(tempfile.mkdtemp(prefix="p2paudit-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    run = args.run
    if run is None:
        run = work / "run"
        if not (run / "manifest.json").exists():
            publish_run(
                TrainPlan(run, "tiny", steps=2, ckpt_every=2, backend="reference"), identity_from_seed(b"\x67" * 32)
            )
    protocols = [p for p in args.protocols.split(",") if p]
    unknown = set(protocols) - set(ALL_PROTOCOLS)
    if unknown:
        sys.exit(f"unknown protocol(s) {sorted(unknown)}; known: {', '.join(ALL_PROTOCOLS)}")
    cases = None if args.replay is None else load_cases(args.replay, protocols)
    config = FuzzConfig(
        per_protocol=args.per_protocol,
        seed=args.seed,
        max_findings_per_protocol=args.max_findings,
        confirm_suspects=args.confirm,
        daemon_seconds=max(1800.0, 0.1 * args.per_protocol * len(protocols)),
    )
    what = f"replaying {len(cases)} recorded inputs" if cases is not None else f"{args.per_protocol} inputs"
    print(f"fuzzing a daemon on {run} with {what} on {len(protocols)} protocol(s), seed {args.seed}; work in {work}")
    began = time.monotonic()

    def progress(line: str) -> None:
        print(f"{time.monotonic() - began:8.1f}s  {line}", flush=True)

    report = trio.run(fuzz_daemon, run, work / "campaign", protocols, config, cases, progress)
    print()
    print(report.summary())
    for finding in report.findings:
        print()
        print(finding.describe())
    shown = {finding.describe() for finding in report.findings}
    problems = [line for line in report.failures(config) if line not in shown]
    if problems:
        print()
        print("other problems:")
        for line in problems:
            print(f"  {line}")


if __name__ == "__main__":
    main()
