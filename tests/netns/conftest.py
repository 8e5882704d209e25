"""Fixtures for the namespace tests: skip with one line where namespaces cannot be built, fail in CI."""

from __future__ import annotations

import pytest

from tests.ci_gate import skip_or_fail

from .fabric import Fabric, unavailable_reason

_REASON: list[str | None] = []


def require_netns() -> None:
    """Skip (or, when the CI environment variable is set, fail) unless namespaces can be built here."""
    if not _REASON:
        _REASON.append(unavailable_reason())
    reason = _REASON[0]
    if reason is None:
        return
    skip_or_fail("the network namespace tests", reason)


@pytest.fixture
def netns_fabric():
    """A fabric with one public host and two homes behind their own NATs, removed afterwards."""
    require_netns()
    with Fabric(homes=2, public=1) as net:
        yield net
