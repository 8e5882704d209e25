#!/usr/bin/env bash
# Create .venv and install p2paudit with its test extras.
# torch is pinned and installed first: an unpinned torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
# The venv is built with exactly the interpreter checked here.
PY=""
for candidate in python3.11 python3.12 python3.13 python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    PY=$(command -v "$candidate"); break
  fi
done
if [ -z "$PY" ]; then
  echo "error: Python 3.11 or newer is needed (tried python3.11, python3.12, python3.13, python3)" >&2; exit 2
fi
missing=""
"$PY" -c 'import venv, ensurepip' >/dev/null 2>&1 || missing="$missing python3-venv"
# The mDNS test runs two daemons in a private network namespace (unshare -rn, ip).
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
command -v unshare >/dev/null 2>&1 || missing="$missing util-linux"
# The NAT fabric of tests/netns (namespaces, veths, a bridge, masquerading routers): iproute2 and nftables.
command -v nft >/dev/null 2>&1 || missing="$missing nftables"
# The no-FMA audit of the cpu kernels disassembles their machine code as numba cached it (objdump).
command -v objdump >/dev/null 2>&1 || missing="$missing binutils"
# A lab run's replay runs the publisher's script in a bubblewrap sandbox (p2paudit/audit/lab_sandbox.py).
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
if [ -n "$missing" ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq $missing >/dev/null
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e '.[test]'
# The js-libp2p interop peer (tests/interop/test_js_peer.py): Node.js and the npm packages its lock pins.
if ! { command -v node && command -v npm; } >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
if command -v node >/dev/null 2>&1; then
  (cd tests/interop/js && npm ci --no-audit --no-fund --loglevel=error)
fi
# The explorer's browser tests (tests/explorer): Debian's headless Chromium and its driver, driven by Selenium.
if ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
fi
