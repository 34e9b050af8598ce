"""The one parser of a device spec: what ``device=`` / ``--device`` names, in every callback, runner and command.

``BoardSpec.parse(text)``:

- ``"auto"`` (or ``None``): the board found here (a Jetson's sensor and controller, else NVML, RAPL, else none);
- ``"none"`` / ``"null"`` / ``"cpu"`` / ``"host"``: this machine, nothing to measure or control (``kind="host"``);
- ``"sim"`` / ``"sim:orin-agx"``: the simulated board of that key (the twin), always spelled ``sim:<key>``;
- a backend name: ``"jetson"`` (``"ina3221"``, ``"jetson:sysfs"``), ``"nvpmodel"`` (``"jetson:nvpmodel"``), ``"jtop"``,
  ``"nvml"`` / ``"nvml:N"``, ``"rapl"``, or one added to the sensor or controller registries.

A torch device given where a board is meant (``cuda``, ``cuda:0``, ``mps``) is a ``ValueError`` naming
``--torch-device``. ``spec.key`` is the canonical spelling (what the per-process board cache and the profile store
use); ``str(spec)`` is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BoardSpec", "HOST_NAMES", "SIM_DEFAULT", "DEVICE_HELP"]

#: names of "this machine, nothing to measure or control"
HOST_NAMES = ("none", "null", "cpu", "host")
#: the board the twin plays when ``sim`` names none
SIM_DEFAULT = "orin-agx"
DEVICE_HELP = "auto, jetson, nvpmodel, jtop, nvml[:N], rapl, none, sim:orin-agx"
_ALIASES = {"ina3221": "jetson", "jetson:sysfs": "jetson", "jetson:nvpmodel": "nvpmodel"}
_TORCH = ("cuda", "mps", "xpu", "hip")


@dataclass(frozen=True)
class BoardSpec:
    """A parsed device spec (see the module docstring): ``kind`` and its argument ``arg``."""

    kind: str
    arg: str = ""

    @classmethod
    def parse(cls, spec: str | BoardSpec | None = "auto", *, host_cpu: bool = True) -> BoardSpec:
        """Parse ``spec``. ``host_cpu``: ``"cpu"`` means this machine (the Python API's ``device="cpu"``); the
        command line, where ``cpu`` could be a torch device, passes False and gets an error naming
        ``--torch-device``."""
        if isinstance(spec, BoardSpec):
            return spec
        text = "auto" if spec is None else str(spec).strip()
        text = text or "auto"
        text = _ALIASES.get(text.lower(), text)
        kind, _, arg = text.partition(":")
        kind, arg = kind.lower(), arg.strip()  # an argument keeps its case (a port, a board file's path)
        if kind in _TORCH or (kind == "cpu" and not host_cpu):
            raise ValueError(f"device {text!r}: a device names a board in lightning_edge ({DEVICE_HELP}); for a "
                             f"torch device use --torch-device {text} (torch_device= in Python)")
        if kind in HOST_NAMES:
            if arg:
                raise ValueError(f"device {text!r}: {kind!r} takes no argument")
            return cls("host")
        if kind == "sim":  # a board key is lower case; a board file's path keeps its case (file systems are case-sensitive)
            return cls("sim", arg if arg.endswith(".json") else (arg.lower() or SIM_DEFAULT))
        if kind == "auto" and arg:
            raise ValueError(f"device {text!r}: 'auto' takes no argument")
        return cls(kind, arg)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.arg}" if self.arg else self.kind

    @property
    def simulated(self) -> bool:
        return self.kind == "sim"

    def __str__(self) -> str:
        return self.key
