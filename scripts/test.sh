#!/usr/bin/env bash
# Install (idempotent), lint, format-check and type-check (fast, before anything slow), then run the whole
# test suite, slow multi-process tests included. This is what CI (.ci/run) runs.
#
#   scripts/test.sh           everything
#   scripts/test.sh --fast    a developer's loop: no install (.venv must exist), lint, then the tests
#                             not marked slow (pytest -m "not slow"); docs/benchmarks.md has both timings
#
# The tests run in two phases: everything not marked `serial` on P2PAUDIT_TEST_WORKERS pytest-xdist
# workers, grouped as tests/conftest.py says; then the `serial` tests (each holds a measured time to a
# bound) alone in one process. Both phases run; the script fails if either does. The default number of
# workers is what measured fastest on 2 cores (docs/benchmarks.md, "Test suite"): FULL_WORKERS for
# everything, 2 for --fast (each worker collects the whole suite, and the fast tests keep the cores busy).
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
case "${1:-}" in
  --fast) fast=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--fast]" >&2; exit 2 ;;
esac
FULL_WORKERS=3
if [ "$fast" = 1 ]; then workers="${P2PAUDIT_TEST_WORKERS:-2}"; else workers="${P2PAUDIT_TEST_WORKERS:-$FULL_WORKERS}"; fi
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
# Compile the cpu backend's numba kernels once, before the workers start: from a cold cache (a fresh clone, a
# changed kernel) every worker would compile them itself (about 60 s of CPU each). Two compiles, side by side
# and beside mypy: the host's (into kernels/__pycache__) and, for the tests that run under
# NUMBA_CPU_NAME=generic, the generic CPU's into its own cache (tests/generic_isa.py says why its own).
compile_kernels() {
  .venv/bin/python - <<'EOF'
from pathlib import Path

import numpy as np

from p2paudit.engine.backends import single_process_step
from p2paudit.engine.config import train_config
from p2paudit.engine.state import init_state
from p2paudit.lab import load_script, train_script
from p2paudit.lab.warm import warm_kernels

cfg = train_config("tiny")
tokens = np.random.default_rng(0).integers(0, 256, (cfg.micro_batches, cfg.batch_size, cfg.model.seq_len + 1))
for arithmetic in (1, 2):  # both versions' kernels (version 2 folds with matmul_packed_fused)
    single_process_step(cfg, "cpu", arithmetic)(init_state(cfg), tokens.astype(np.int64))
    # the lab mode's kernels as a lab replay's parent warms them (p2paudit/lab/warm.py: also what the tiny step
    # does not reach, a product wider than 256 columns and one head's attention backward, 15-20 s of compiling
    # each per worker otherwise, and the threaded elementwise kernels from PARALLEL_MIN elements), and the
    # examples' steps
    warm_kernels(arithmetic)
    for example in ("lab_gpt2", "lab_llama"):
        train_script(load_script(Path("examples") / f"{example}.py"), 1, arithmetic=arithmetic)
EOF
}
compile_kernels & host_compile=$!
generic_compile=""
if [ "$fast" = 0 ]; then  # the generic-CPU tests are all slow ones
  NUMBA_CPU_NAME=generic NUMBA_CACHE_DIR="$PWD/.numba-generic" compile_kernels & generic_compile=$!
fi
trap 'kill $host_compile $generic_compile 2>/dev/null || true' EXIT
# Static types, strict on kernels, ledger, exit_codes and all of p2paudit ([tool.mypy] in pyproject.toml).
.venv/bin/mypy
wait "$host_compile"
if [ -n "$generic_compile" ]; then wait "$generic_compile"; fi
trap - EXIT
# Cached verdicts (tests/verdict_cache.py: the no-FMA check) are recomputed from scratch under CI.
if [ -n "${CI:-}" ]; then rm -rf .pytest_cache/verdicts; fi
if [ "$fast" = 1 ]; then only="not slow and "; else only=""; fi
status=0
# --durations: the longest tests, named in every run, to keep the whole suite within its 20 minutes on 2 cores
.venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --dist loadgroup --durations=25 -m "${only}not serial" tests || status=$?
.venv/bin/python -m pytest -q -p no:cacheprovider -m "${only}serial" tests || status=$?
exit "$status"
