"""The live tests share helpers that sit beside them (pytest runs with --import-mode=importlib)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from sim_hosts import wait_until_serving  # noqa: E402 (importable once the path above is set)


@pytest.fixture
def replicas_serving():
    """Every replica UP in HAProxy before the test (modules that restart replicas use it for each test)."""
    wait_until_serving()
