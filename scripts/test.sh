#!/usr/bin/env bash
# Install (idempotent), lint, format-check and type-check (fast, before anything slow), then run the whole
# test suite, slow multi-process tests included. This is what CI (.ci/run) runs.
#
#   scripts/test.sh           everything
#   scripts/test.sh --fast    a developer's loop: no install (.venv must exist), lint, then the tests
#                             not marked slow (pytest -m "not slow"); docs/benchmarks.md has both timings
#
# The tests run in two phases: everything not marked `serial` on P2PAUDIT_TEST_WORKERS pytest-xdist
# workers (default 4: most slow tests wait on sockets, subprocesses and timers, so 4 workers pay on 2
# cores), grouped as tests/conftest.py says; then the `serial` tests (each holds a measured time to a
# bound) alone in one process. Both phases run; the script fails if either does.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
case "${1:-}" in
  --fast) fast=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--fast]" >&2; exit 2 ;;
esac
workers="${P2PAUDIT_TEST_WORKERS:-4}"
case "$workers" in
  ''|*[!0-9]*) echo "error: P2PAUDIT_TEST_WORKERS must be a number of workers (0: no xdist), not '$workers'" >&2; exit 2 ;;
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
# Static types, strict on kernels, ledger, p2paudit/engine, p2paudit/attest and exit_codes ([tool.mypy] in pyproject.toml).
.venv/bin/mypy
# Cached verdicts (tests/verdict_cache.py: the no-FMA check) are recomputed from scratch under CI.
if [ -n "${CI:-}" ]; then rm -rf .pytest_cache/verdicts; fi
if [ "$fast" = 1 ]; then only="not slow and "; else only=""; fi
status=0
.venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist loadgroup -m "${only}not serial" tests || status=$?
.venv/bin/python -m pytest -q -p no:cacheprovider -m "${only}serial" tests || status=$?
exit "$status"
