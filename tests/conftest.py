"""Every test starts with no board open in the process: ``get_board`` keeps one Board per device per process (issue
26), so a board a test leaves open (a mode it left set) would otherwise be the next test's board."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_boards():
    yield
    from lightning_edge.devices.board import forget_boards

    forget_boards()
