"""One rule for tests that need something a machine may lack (namespaces, mounts, a browser, npm packages):
skip with one line where it is missing, but fail under CI (the CI environment variable), so that CI can
never pass by skipping them."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def skip_or_fail(what: str, reason: str) -> NoReturn:
    """Skip with `reason`, or fail when CI is set (`what` names the tests CI must run)."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run {what}: {reason}", pytrace=False)
    pytest.skip(reason)
