"""The twin is a pure model: no mode controller, no clock, no current mode, no running workload, no noise state.
The live simulated board (its mode, what runs, the power's settling and noise) is ``devices.sim.live.LiveTwin``;
nothing in ``lightning_edge/twin/`` drives a controller."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import lightning_edge.twin as twin_pkg
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.validation import LOW, MAXN

LIVE_METHODS = ("current_mode", "set_mode", "begin", "end", "running", "set_layer", "target_power", "power_now",
                "power_parts_now", "activity")
LIVE_ARGS = ("controller", "clock", "noise", "seed", "power_noise", "initial")


def test_the_model_takes_no_controller_clock_or_noise():
    params = inspect.signature(OrinTwin.__init__).parameters
    assert not set(LIVE_ARGS) & set(params), sorted(set(LIVE_ARGS) & set(params))
    with pytest.raises(TypeError):
        OrinTwin(controller=object())  # type: ignore[call-arg]


def test_the_model_has_no_live_state(twin):
    assert not [m for m in LIVE_METHODS if hasattr(twin, m)]
    state = set(vars(twin))
    assert not state & {"controller", "clock", "_mode", "_activity", "_rng", "_lock", "_from_w", "_change_s",
                        "_target_key", "_ctl_change_s", "noise", "power_noise"}, sorted(state)


def test_the_models_answers_are_functions_of_their_arguments():
    """Asked twice, in any order, the model answers the same: nothing it is asked moves a state of its own."""
    twin = OrinTwin()
    wl = twin.workload("resnet18", 8, "train")
    first = (float(wl.step(LOW).power_w), twin.settling_w(40.0, 20.0, 0.5), float(twin.static_power(MAXN)))
    wl.step(MAXN)
    twin.settling_w(10.0, 30.0, 2.0, 3.0)
    assert (float(wl.step(LOW).power_w), twin.settling_w(40.0, 20.0, 0.5), float(twin.static_power(MAXN))) == first


def test_a_workloads_layers_are_told_their_mode(twin):
    wl = twin.workload("resnet18", 8, "train")
    with pytest.raises((TypeError, ValueError)):
        wl.layers()  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="one mode"):
        wl.layers(None)
    assert wl.layers(MAXN).step is not None


def _controller_uses(path: Path) -> list[str]:
    """Attribute calls ``.apply(`` / ``.current(`` and any ``.last_change_s`` in one module (a mode controller's
    interface: a pure model never drives or follows one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("apply", "current"):
            found.append(f"{path.name}:{node.lineno}: .{node.func.attr}(")
        elif isinstance(node, ast.Attribute) and node.attr == "last_change_s":
            found.append(f"{path.name}:{node.lineno}: .last_change_s")
    return found


def test_nothing_in_the_twin_package_calls_a_controller():
    root = Path(twin_pkg.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) > 5
    found = [hit for f in files for hit in _controller_uses(f)]
    assert not found, "\n".join(found)


def test_the_scan_finds_a_controller_call(tmp_path):
    """The scan above would see the old design (the twin reading its controller's mode and last change)."""
    old = tmp_path / "old.py"
    old.write_text("def f(self):\n    m = self.controller.current()\n    t = self.controller.last_change_s\n"
                   "    self.controller.apply(m)\n")
    assert len(_controller_uses(old)) == 3
