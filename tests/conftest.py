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


def _mount_tmpfs(path, size: str, readonly: bool = False) -> str | None:
    """Mount a tmpfs of ``size`` at ``path``; the reason when this sandbox cannot (not root, no mount)."""
    import os
    import subprocess

    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    opts = f"size={size}" + (",ro" if readonly else "")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    return None if res.returncode == 0 else f"mount -t tmpfs refused here: {res.stderr.strip()[:120]}"


@pytest.fixture
def small_disk(tmp_path):
    """A real, tiny file system (a 64 KiB tmpfs): ``small_disk.fill()`` leaves it with no space (ENOSPC for every
    write after it), ``small_disk.readonly()`` remounts it read-only (EROFS). Skipped, naming why, where this
    sandbox cannot mount."""
    import subprocess

    mnt = tmp_path / "disk"
    mnt.mkdir()
    why = _mount_tmpfs(mnt, "64k")
    if why:
        pytest.skip(why)

    class Disk:
        path = mnt

        def fill(self) -> None:
            with open(mnt / ".filler", "wb", buffering=0) as fh:
                try:
                    while True:
                        fh.write(b"\0" * 4096)
                        fh.flush()
                except OSError:
                    pass

        def readonly(self) -> None:
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)

    try:
        yield Disk()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
