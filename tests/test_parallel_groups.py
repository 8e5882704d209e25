"""tests/conftest.py's groups for parallel runs name paths that exist, and group exactly their tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import GROUPS, group_of

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("prefix", sorted(GROUPS))
def test_every_group_names_tests_that_exist(prefix):
    # A moved or renamed file would otherwise leave its group silently empty, its tests spread over workers.
    assert (TESTS / prefix).exists(), f"tests/{prefix} is gone: update GROUPS in tests/conftest.py"
    assert any(path.name.startswith("test_") for path in [TESTS / prefix, *(TESTS / prefix).glob("test_*.py")])


def test_group_of_a_node_id():
    assert group_of("tests/netns/test_fabric.py::test_a_router_link_goes_down_and_up_again") == "netns"
    assert group_of("tests/netns/test_reach.py::test_x[a-b]") == "netns"
    assert group_of("tests/explorer/test_explorer_browser.py::test_y") == "browser"
    assert group_of("tests/explorer/test_explorer_api.py::test_z") is None
    assert group_of("tests/node/test_sync.py::test_netns_in_a_name") is None
