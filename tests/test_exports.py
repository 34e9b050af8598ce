"""Every public name a package lists in ``__all__`` resolves (the lazy export maps name the module that defines it).

Found by walking the package: after SimWorkload moved to another module, ``from lightning_edge.devices.sim import *``
raised AttributeError because the lazy map still named the old module.
"""

from __future__ import annotations

import importlib
import pkgutil

import lightning_edge


def _modules():
    yield lightning_edge
    for info in pkgutil.walk_packages(lightning_edge.__path__, "lightning_edge."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        yield importlib.import_module(info.name)


def test_every_name_in_all_resolves():
    broken = []
    for mod in _modules():
        for name in getattr(mod, "__all__", ()):
            try:
                getattr(mod, name)
            except AttributeError as exc:
                broken.append(f"{mod.__name__}.{name}: {exc}")
    assert not broken, "\n".join(broken)


def test_star_import_of_the_twin_and_the_simulated_board():
    ns: dict = {}
    exec("from lightning_edge.twin import *", ns)
    assert "SimWorkload" in ns and "OrinTwin" in ns
    ns = {}
    exec("from lightning_edge.devices.sim import *", ns)
    assert "SimulatedOrin" in ns and "SimModeController" in ns and "LiveTwin" in ns
