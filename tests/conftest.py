"""Every test starts with no board open in the process: ``get_board`` keeps one Board per device per process (issue
26), so a board a test leaves open (a mode it left set) would otherwise be the next test's board."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_boards():
    yield
    from lightning_edge.devices.board import forget_boards

    forget_boards()


@pytest.fixture(autouse=True)
def _no_installed_board_files(tmp_path_factory, monkeypatch):
    """A calibrated board file installed on this machine (``~/.config/lightning_edge/boards``) is never a test's
    model of a board: the folder is an empty temporary one unless a test installs a file there."""
    monkeypatch.setenv("LIGHTNING_EDGE_BOARDS", str(tmp_path_factory.mktemp("boards")))
