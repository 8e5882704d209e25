"""Small published runs shared by the run tests.

Trained on the cpu backend (the same bytes as on any backend; numba's on-disk cache makes its steps quick):
the tests replay them on whichever backend they are about.
"""

import shutil
from pathlib import Path

import pytest

from p2paudit.identity import identity_from_seed
from p2paudit.run.publisher import TrainPlan, publish_run

PUBLISHER = identity_from_seed(bytes(range(32)))


@pytest.fixture(scope="session")
def publisher():
    """The test publisher's key (fixed seed)."""
    return PUBLISHER


@pytest.fixture(scope="session")
def published_run(tmp_path_factory) -> Path:
    """tiny, 4 steps, checkpoints at states 0, 2, 4."""
    run_dir = tmp_path_factory.mktemp("published") / "run"
    publish_run(TrainPlan(run_dir, "tiny", steps=4, ckpt_every=2, backend="cpu"), PUBLISHER)
    return run_dir


@pytest.fixture
def run_copy(published_run, tmp_path) -> Path:
    """A private copy of the published run that a test may damage."""
    target = tmp_path / "run"
    shutil.copytree(published_run, target)
    return target


@pytest.fixture(scope="session")
def traced_run(tmp_path_factory) -> Path:
    """tiny, 2 steps with published traces, checkpoints at states 0, 1, 2."""
    run_dir = tmp_path_factory.mktemp("traced") / "run"
    publish_run(TrainPlan(run_dir, "tiny", steps=2, ckpt_every=1, backend="cpu", traces=True), PUBLISHER)
    return run_dir


@pytest.fixture
def traced_copy(traced_run, tmp_path) -> Path:
    """A private copy of the traced run that a test may damage."""
    target = tmp_path / "traced"
    shutil.copytree(traced_run, target)
    return target
