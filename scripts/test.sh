#!/usr/bin/env bash
# Install (idempotent), lint, format-check and type-check (fast, before anything slow), then run the whole
# test suite, slow multi-process tests included. This is what CI (.ci/run) runs.
#
#   scripts/test.sh           everything
#   scripts/test.sh --fast    a developer's loop: no install (.venv must exist), lint, then the tests
#                             not marked slow (pytest -m "not slow"); docs/benchmarks.md has both timings
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
case "${1:-}" in
  --fast) fast=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--fast]" >&2; exit 2 ;;
esac
if [ "$fast" = 1 ]; then
  if [ ! -x .venv/bin/python ]; then
    echo "error: no .venv: run scripts/install.sh (or scripts/test.sh without --fast) first" >&2; exit 2
  fi
else
  bash scripts/install.sh
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Static types, strict on kernels, ledger, p2paudit/attest and exit_codes ([tool.mypy] in pyproject.toml).
.venv/bin/mypy
if [ "$fast" = 1 ]; then
  .venv/bin/python -m pytest -q -p no:cacheprovider -m "not slow" tests
else
  .venv/bin/python -m pytest -q -p no:cacheprovider tests
fi
