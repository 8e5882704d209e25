"""A small published run with operation traces, shared by the audit tests.

Trained on the cpu backend (the same bytes as on any backend, numba's on-disk cache makes its steps quick);
the tests replay it on whichever backend they are about.
"""

import shutil
from pathlib import Path

import pytest

from p2paudit.identity import identity_from_seed
from p2paudit.run.publisher import TrainPlan, publish_run

AUDIT_PUBLISHER = identity_from_seed(b"\x11" * 32)


@pytest.fixture(scope="session")
def traced_run(tmp_path_factory) -> Path:
    """tiny, 4 steps, checkpoints at states 0, 2, 4, a published trace for every step."""
    run_dir = tmp_path_factory.mktemp("traced") / "run"
    publish_run(TrainPlan(run_dir, "tiny", steps=4, ckpt_every=2, backend="cpu", traces=True), AUDIT_PUBLISHER)
    return run_dir


@pytest.fixture
def traced_copy(traced_run, tmp_path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(traced_run, target)
    return target


@pytest.fixture(scope="session")
def audit_publisher():
    return AUDIT_PUBLISHER
