"""The deployment pages' commands, run as written inside the namespace fabric, and the relay load of NATed
volunteers (docs/deploy-lab.md, docs/deploy-volunteer.md, docs/network.md "At internet scale").

A lab in pub0 (203.0.113.10): `p2paudit init`, `p2paudit train`, `python3 -m http.server` serving the run,
a bootstrap daemon with relay service in its own home; two volunteers, home0 and home1, each behind its own
NAT with random port mapping (hole punching cannot work: everything between them goes through the relay),
each started with the volunteer page's one command; then the lab's `p2paudit announce`, and `p2paudit
status` in each home once every volunteer holds every step twice. Printed: each command and its last
output lines, the time to coverage, the relay's `relayed_bytes` during the audit and per second afterwards
(`--watch` seconds of steady state), and each ledger's size.

    .venv/bin/python tests/netns/experiments/deploy_walkthrough.py [--steps 8] [--watch 60] [--root /srv]  (as root)

--root: where the homes and the served run are made (lab, boot, www, volunteer0, volunteer1; none may exist
yet; removed afterwards), so that the printed commands are the pages' own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/, so that `netns.fabric` imports when run as a script

from netns.fabric import Fabric  # noqa: E402

P2PAUDIT = [sys.executable, "-m", "p2paudit"]
PUB = Fabric.public_addr(0)


def env_for(home: Path) -> dict[str, str]:
    return {"P2PAUDIT_HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"}


def shown(argv: list[str], home: Path | None) -> str:
    text = " ".join(["p2paudit", *argv[3:]] if argv[:3] == P2PAUDIT else argv)
    return (f"P2PAUDIT_HOME={home} " if home else "") + text


def run_here(argv: list[str], home: Path, tail: int = 3) -> str:
    print(f"$ {shown(argv, home)}", flush=True)
    done = subprocess.run(argv, env=env_for(home), capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    print("\n".join("  " + line for line in out.strip().splitlines()[-tail:]), flush=True)
    if done.returncode != 0:
        raise SystemExit(f"exit {done.returncode}")
    return out


def status(home: Path) -> dict:
    try:
        return json.loads((home / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def covered(home: Path, steps: int) -> bool:
    runs = status(home).get("runs") or []
    return bool(runs) and runs[0]["checked_r"] == steps


def relayed(boot: Path) -> int:
    service = status(boot).get("reach", {}).get("relay_service") or {}
    return int(service.get("relayed_bytes", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--watch", type=float, default=60.0)
    parser.add_argument("--root", type=Path, default=None)
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="deploy-"))
    lab, boot, www = root / "lab", root / "boot", root / "www"
    homes = [root / "volunteer0", root / "volunteer1"]
    made = [lab, boot, www, *homes]
    if any(path.exists() for path in made):
        raise SystemExit(f"{root} already holds one of {[p.name for p in made]}: choose another --root")
    try:
        run_here([*P2PAUDIT, "init", "--name", "lab"], lab)
        run_here([*P2PAUDIT, "train", str(www / "run"), "--steps", str(args.steps)], lab)
        lab_key = run_here([*P2PAUDIT, "id"], lab).split()[2]
        run_here([*P2PAUDIT, "init", "--name", "boot"], boot)
        boot_id = run_here([*P2PAUDIT, "id"], boot).split()[5]
        boot_addr = f"/ip4/{PUB}/tcp/4001/p2p/{boot_id}"
        with Fabric(homes=2, public=1, nat_mapping="random") as net:
            pub = net.node("pub0")
            server = ["python3", "-m", "http.server", "8000", "--bind", PUB, "--directory", str(www)]
            print(f"[pub0] $ {' '.join(server)}", flush=True)
            net.spawn(pub, server, env=env_for(lab))
            daemon = [*P2PAUDIT, "daemon", "--listen", "/ip4/0.0.0.0/tcp/4001", "--announce", f"/ip4/{PUB}/tcp/4001"]
            daemon += ["--relay-service", "--follow", lab_key]
            print(f"[pub0] $ {shown(daemon, boot)}", flush=True)
            procs = [net.spawn(pub, daemon, env=env_for(boot))]
            for i, home in enumerate(homes):
                volunteer = [*P2PAUDIT, "daemon", "--follow", lab_key, "--peer", boot_addr]
                volunteer += ["--listen", "/ip4/0.0.0.0/tcp/4001"]
                print(f"[home{i}] $ {shown(volunteer, home)}", flush=True)
                procs.append(net.spawn(net.node(f"home{i}"), volunteer, env=env_for(home)))
            while not all(status(h).get("peers") for h in [boot, *homes]):
                time.sleep(0.5)
            announce = [*P2PAUDIT, "announce", f"http://{PUB}:8000/run/", "--peer", boot_addr]
            print(f"[pub0] $ {shown(announce, lab)}", flush=True)
            done = net.exec(pub, ["env", *(f"{k}={v}" for k, v in env_for(lab).items()), *announce], timeout=120)
            print("  " + done.stdout.strip().splitlines()[-1], flush=True)
            t0, before = time.monotonic(), relayed(boot)
            while not all(covered(h, args.steps) for h in homes):
                if time.monotonic() - t0 > 900:
                    raise SystemExit("not covered within 900 s: " + json.dumps([status(h) for h in homes])[-3000:])
                time.sleep(1.0)
            audit_s, audit_bytes = time.monotonic() - t0, relayed(boot) - before
            for i, home in enumerate(homes):
                print(f"[home{i}] $ {shown([*P2PAUDIT, 'status'], home)}", flush=True)
                out = net.exec(net.node(f"home{i}"), ["env", *(f"{k}={v}" for k, v in env_for(home).items()),
                               *P2PAUDIT, "status"]).stdout  # fmt: skip
                print("\n".join("  " + line for line in out.strip().splitlines()[:14]), flush=True)
            watch0, quiet0 = time.monotonic(), relayed(boot)
            time.sleep(args.watch)
            quiet_rate = (relayed(boot) - quiet0) / (time.monotonic() - watch0)
            final = [status(h) for h in homes]
            for proc in procs:
                proc.terminate()
    finally:
        for path in made if args.root else [root]:
            shutil.rmtree(path, ignore_errors=True)
    print(f"every volunteer held every step twice {audit_s:.1f} s after the announcement")
    print(f"relayed during the audit: {audit_bytes:,} bytes; in steady state: {quiet_rate:,.0f} bytes/s "
          f"({quiet_rate * 86400 / 1e6:.1f} MB/day) for 2 NATed volunteers")  # fmt: skip
    for i, s in enumerate(final):
        links = {link["peer"][:12]: link["kind"] for link in s["reach"]["links"]}
        print(f"volunteer{i}: reach {s['reach']['state']}, ledger {s['ledger']['size']} entries, "
              f"audited {s['audited']}, received {s['received']}, links {links}")  # fmt: skip


if __name__ == "__main__":
    main()
