"""Shared fixtures of the kernel tests.

Helpers live in modules with distinct names (kernel_cases.py,
kernel_subprocess.py), imported by path: this directory is on sys.path under
pytest's default import mode, and the probe scripts put it there themselves.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def reference():
    """The reference backend module."""
    from kernels import reference

    return reference


# Re-exported for test modules that import them from here (test_triton_*.py).
from kernel_cases import IN_PROCESS_BACKENDS, SEED  # noqa: E402,F401
from kernel_subprocess import HERE, REPO, run_probe  # noqa: E402,F401
