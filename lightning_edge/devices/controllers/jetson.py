"""Switching power modes on a Jetson by writing sysfs directly (no reboot, the preferred way).

The writes of one mode change, their order and their checks are :mod:`lightning_edge.devices.controllers.sysfs`'s
(see docs/power-modes.md); this module is the controller around them: state file, lock and restore come from
:class:`~lightning_edge.devices.controllers.base.ModeController`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TextIO

from lightning_edge import catalog
from lightning_edge.catalog import BoardInfo
from lightning_edge.devices.controllers.nvpmodel import _SysfsBoardController, restore_nvpmodel_snapshot
from lightning_edge.devices.controllers.sysfs import (
    DryRunWriter,
    JetsonLayout,
    JetsonSysfs,
    SysfsWriter,
    Write,
    root_suffix,
)
from lightning_edge.modes import PowerMode, PowerModeSpace


# --------------------------------------------------------------------------- the controller
class JetsonSysfsController(_SysfsBoardController):
    """Power modes on a Jetson by direct sysfs/debugfs writes (no reboot). Needs root (or the udev rule).

    ``JetsonSysfsController(root="/", board=None, writer=None, space=None, **common)``:
    ``root`` is the file-system root (a fake tree in tests), ``board`` a catalogue key to override
    detection, ``writer`` the :class:`SysfsWriter` seam, ``space`` a grid to use instead of the one
    discovered from the board (e.g. ``fulcrum_space()``); ``**common`` as in :class:`ModeController`.
    """

    name = "jetson"

    def __init__(
        self,
        root: str | os.PathLike = "/",
        *,
        board: str | BoardInfo | None = None,
        writer: SysfsWriter | None = None,
        space: PowerModeSpace | None = None,
        dry_run: bool = False,
        out: TextIO | None = None,
        **common: Any,
    ) -> None:
        self.root = Path(root)
        self.layout = JetsonLayout.probe(self.root, board)
        real = writer or SysfsWriter()
        self.writer: SysfsWriter = DryRunWriter(real, out) if dry_run else real
        self.sysfs = JetsonSysfs(self.layout, self.writer)
        device_id = f"jetson-{self.layout.board.key}{root_suffix(self.root)}"
        super().__init__(
            space=space or self.sysfs.space(), device_id=device_id, dry_run=dry_run, out=out, **common
        )

    def read_raw(self) -> dict[str, Any]:
        """Every knob's raw sysfs value (kHz / Hz / 0-1), as a snapshot dict."""
        return self.sysfs.read_raw()

    def plan(self, mode: PowerMode | str) -> list[Write]:
        """The ordered writes :meth:`apply` would do from the board's current state."""
        target = self.space.coerce(mode)
        return self.sysfs.plan(self.sysfs.read_raw(), self.sysfs.want_of_mode(target))

    # hooks
    def _snapshot(self) -> dict[str, Any]:
        return self.sysfs.read_raw()

    def _apply_mode(self, mode: PowerMode) -> tuple[list[str], list[str]]:
        want = self.sysfs.want_of_mode(mode)
        return self.sysfs.change(want, on_online=lambda raw: self._record_ranges(raw, mode))

    def _record_ranges(self, raw: dict[str, Any], mode: PowerMode) -> None:
        """Record in the snapshot (and in the state file, before anything writes them) the ranges of the clusters
        this change brought online that the snapshot lacks: they were offline when it was taken (an inactive policy
        cannot be read), and the kernel kept them since, so they are the ones a restore must put back. The
        original kept by an earlier ``mode set`` gets them too: nothing of ours has written them since it was
        recorded, or it would know them."""
        if self._session is None:
            return
        kept = self._session["kept_state"]
        learnt = False
        for snap in (self._session["snapshot"], kept["snapshot"] if kept else None):
            body = snap.get("raw", snap) if isinstance(snap, dict) else None  # "raw": an nvpmodel snapshot
            freq = body.get("cpufreq") if isinstance(body, dict) else None
            if not isinstance(freq, dict):
                continue
            for pol, rng in raw["cpufreq"].items():
                if pol not in freq:
                    freq[pol] = dict(rng)
                    learnt = True
        if learnt:
            self._write_state(phase="applying", applied=mode)

    def _apply_snapshot(self, snapshot: dict[str, Any]) -> tuple[list[str], list[str]]:
        actions: list[str] = []
        if snapshot.get("kind") == "nvpmodel":
            # left by the nvpmodel controller (same board, same state file): put its mode and conf back
            actions += restore_nvpmodel_snapshot(
                snapshot, board_conf=self.root / catalog.NVPMODEL_CONF, writer=self.writer, dry_run=self.dry_run,
                trusted=self._snapshot_trusted)
            snapshot = snapshot["raw"]
        more, mismatches = self.sysfs.change(snapshot)
        return actions + more, mismatches
