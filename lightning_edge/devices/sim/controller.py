"""The twin's power-mode controller: a simulated Jetson that switches modes in memory.

It plays the mode space and the nvpmodel named modes of every catalogued module (``--device sim:<key>``,
:data:`SIM_BOARDS`, from :data:`lightning_edge.catalog.BOARDS`), or a board file's (``sim:PATH.json``): cores and
frequency tables; the physics are the twin's of that board (:mod:`lightning_edge.twin.board_files`).

Same interface as the real controllers, so callbacks and CLI commands run unchanged on it.
Everything it reports is labelled ``simulated``. It remembers when the mode last changed
(``last_change_s``, on an injectable clock) so the live simulated board
(:class:`~lightning_edge.devices.sim.live.LiveTwin`, which its sensor reads) can model the 2-3 s the power takes to
settle after a change. It is the one home of the simulated board's mode: the live board reads it.

With ``board_file`` the simulated board's mode lives in a small JSON file, so it persists
across processes (``lightning-edge mode set`` then ``mode show``) and crash recovery can be
tested end to end; the state and lock files then live next to it by default.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from lightning_edge import catalog
from lightning_edge.devices.controllers.base import ModeController
from lightning_edge.devices.safety import StateFile
from lightning_edge.modes import KNOBS, PowerMode, PowerModeSpace


def file_board_id(path: str | os.PathLike, key: str) -> str:
    """The identity of the board a board file describes (``sim:PATH.json``): its module key and its file's absolute
    path (hashed), so a file board never shares a state file, a lock or a simulated mode with the catalogue's board of
    its key (``sim:orin-nano-8gb``), nor with another file of the same key."""
    return f"{key}@file-{file_board_digest(path)}"


def file_board_digest(path: str | os.PathLike) -> str:
    """A short digest of a board file's absolute path (what names its simulated mode's file in the state dir)."""
    import hashlib

    return hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:12]


def _sim_boards() -> dict[str, tuple[Callable[[], PowerModeSpace], PowerMode]]:
    out: dict[str, tuple[Callable[[], PowerModeSpace], PowerMode]] = {
        "orin-agx": (catalog.orin_agx_space, catalog.ORIN_AGX_MAXN)}
    for key, info in catalog.BOARDS.items():
        space = info.space()
        if key not in out and space is not None:
            out[key] = (info.space, space.max_mode())  # type: ignore[assignment]
    return out


SIM_BOARDS = _sim_boards()
"""Boards the twin can play: key -> (space factory, power-on mode): every catalogued module with a grid, powered on
in MAXN (the highest mode of its grid)."""


class SimModeController(ModeController):
    """Simulated power-mode controller of the twin (``--device sim:orin-agx``, or any key of :data:`SIM_BOARDS`);
    ``**common`` as in :class:`ModeController`:

    - ``initial``: the mode of a fresh board (default MAXN);
    - ``board_file``: JSON file holding the simulated mode across processes (default: in memory);
    - ``clock``: seconds, for ``last_change_s`` (inject a fake clock in tests);
    - ``on_step(knob, old, new)``: called before each knob changes (a test seam, e.g. to die mid-change);
    - ``identity``: the board's identity when it is not the catalogue's board of ``board`` (a board file's:
      :func:`file_board_id`): its device id, state file and lock are its own.

    Without ``board_file`` the state file and lock are off by default (nothing outlives the
    process); pass ``safety=True`` and ``state_dir`` to turn them on.
    """

    name = "sim"
    source = "simulated"
    needs_root = False

    def __init__(
        self,
        board: str = "orin-agx",
        *,
        space: PowerModeSpace | None = None,
        initial: PowerMode | str | None = None,
        board_file: str | os.PathLike | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_step: Callable[[str, Any, Any], None] | None = None,
        dry_run: bool = False,
        state_dir: str | os.PathLike | None = None,
        safety: bool | None = None,
        handle_exit: bool | None = None,
        out: TextIO | None = None,
        identity: str | None = None,
        **common: Any,
    ) -> None:
        if board not in SIM_BOARDS and space is None:
            raise ValueError(f"no simulated board {board!r}: the twin plays {', '.join(SIM_BOARDS)}")
        make_space, power_on = SIM_BOARDS.get(board, (None, None))
        if space is not None:  # a given grid (a board file's own): powered on in its MAXN
            power_on = space.max_mode()
        self.board = board
        self.named_modes = catalog.BOARDS[board].named_modes if board in catalog.BOARDS else ()
        """The nvpmodel named modes of the board played (:class:`~lightning_edge.catalog.NamedMode`)."""
        self.clock = clock
        self.on_step = on_step
        space = space or make_space()  # type: ignore[misc]
        self._initial = space.coerce(initial) if initial is not None else space.coerce(power_on)
        self._file = StateFile(board_file) if board_file is not None else None
        self._mode = self._initial
        self._last_change_s: float | None = None
        if safety is None:
            safety = board_file is not None or state_dir is not None
        if state_dir is None and board_file is not None:
            state_dir = Path(board_file).parent
        if handle_exit is None:
            handle_exit = board_file is not None
        super().__init__(
            space=space,
            device_id=f"sim:{identity or board}",
            dry_run=dry_run,
            state_dir=state_dir,
            safety=safety,
            handle_exit=handle_exit,
            out=out,
            **common,
        )

    @classmethod
    def probe(cls, arg: str = "", **kw: Any) -> str | None:
        return None  # the twin runs anywhere; an unknown board name is a ValueError from the constructor

    @classmethod
    def open(cls, arg: str = "", **kw: Any) -> SimModeController:
        from lightning_edge.devices.registry import accepted_kwargs

        board = arg or kw.get("board") or "orin-agx"
        opts = accepted_kwargs(cls, {k: v for k, v in kw.items() if k != "board"})
        if str(board).endswith(".json"):  # a board file: its module's named modes, its own grid
            from lightning_edge.twin.board_files import load_board_file

            bf = load_board_file(board)
            ctl = cls(bf.key, **{**opts, "space": opts.get("space") or bf.space(),
                                 "identity": opts.get("identity") or file_board_id(board, bf.key)})
            ctl.spec_arg = str(board)
            return ctl
        return cls(board, **opts)

    def cli_args(self) -> list[str]:
        return ["--device", f"sim:{getattr(self, 'spec_arg', None) or self.board}"]

    @property
    def label(self) -> str:
        return f"simulated {self.space.name or self.board}"

    @property
    def last_change_s(self) -> float | None:
        """``clock()`` at the last mode change made by this controller (``None``: none yet)."""
        return self._last_change_s

    def seconds_since_change(self) -> float | None:
        return None if self._last_change_s is None else self.clock() - self._last_change_s

    # ------------------------------------------------------------------ the simulated board
    def _load(self) -> PowerMode:
        if self._file is None:
            return self._mode
        data = self._file.read()
        if not data or "mode" not in data:
            return self._initial
        return PowerMode.from_dict(data["mode"])

    def _store(self, mode: PowerMode) -> None:
        self._mode = mode
        if self._file is not None:
            self._file.write(
                {
                    "board": self.board,
                    "mode": mode.to_dict(),
                    "label": str(mode),
                    "simulated": True,
                    "changed_at_unix": time.time(),
                }
            )

    def _set(self, mode: PowerMode) -> list[str]:
        """Change the simulated board knob by knob (cores last when lowering, like the real order)."""
        cur = self._load()
        actions = []
        order = list(KNOBS[1:]) + ["cores"] if mode.cores < cur.cores else list(KNOBS)
        for k in order:
            old, new = getattr(cur, k), getattr(mode, k)
            if old == new:
                continue
            actions.append(f"sim:{self.board}: {k} {old} -> {new} (simulated)")
            if self.dry_run:
                print(actions[-1], file=self._out or sys.stdout)
                continue
            if self.on_step is not None:
                self.on_step(k, old, new)
            cur = cur.replace(**{k: new})
            self._store(cur)
        if actions and not self.dry_run:
            self._last_change_s = self.clock()
        return actions

    # ------------------------------------------------------------------ hooks
    def _read_mode(self) -> PowerMode:
        return self._load()

    def _snapshot(self) -> dict[str, Any]:
        return {"kind": "sim", "board": self.board, "mode": self._load().to_dict()}

    def _apply_mode(self, mode: PowerMode) -> tuple[list[str], list[str]]:
        return self._set(mode), []

    def _apply_snapshot(self, snapshot: dict[str, Any]) -> tuple[list[str], list[str]]:
        mode = self._mode_of_snapshot(snapshot)
        if mode is None:
            return [], [f"unreadable simulated snapshot: {json.dumps(snapshot)[:120]}"]
        return self._set(mode), []
