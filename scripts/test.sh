#!/usr/bin/env bash
# Install (idempotent), lint and format-check (fast, before anything slow), then run the whole
# test suite, slow multi-process tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q -p no:cacheprovider tests
