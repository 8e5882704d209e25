#!/usr/bin/env bash
# Install (idempotent) and run the whole test suite, slow multi-process tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/python -m pytest -q -p no:cacheprovider tests
