"""The one description of the machine a benchmark ran on, for every results file."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """CPU, logical CPUs, OS, and the versions of Python, numpy and torch."""
    import numpy as np

    try:
        import torch

        tv = torch.__version__
    except ImportError:  # pragma: no cover
        tv = "not installed"
    return (f"{cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, numpy {np.__version__}, torch {tv}")
