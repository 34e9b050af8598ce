"""The NVML controller: opt-in only; structure, dry run and unavailability (no GPU here)."""

from __future__ import annotations

import io

import pytest

from lightning_edge.devices import (
    ControllerUnavailableError,
    ModePermissionError,
    NvmlController,
    get_controller,
)
from tests.fakes.nvml import FakeNvml


def test_unavailable_without_pynvml_or_gpu():
    reason = NvmlController.why_unavailable()
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert "pip install nvidia-ml-py" in reason
    assert "no NVIDIA GPU" in NvmlController.why_unavailable(nvml=FakeNvml(gpus=0))
    assert "no NVIDIA driver" in NvmlController.why_unavailable(nvml=FakeNvml(fail_init="Driver Not Loaded"))
    with pytest.raises(ControllerUnavailableError, match="nvml:"):
        NvmlController(nvml=FakeNvml(gpus=0))


def test_auto_never_picks_nvml(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ControllerUnavailableError) as exc:
        get_controller("auto", root=tmp_path / "empty", nvml=FakeNvml())
    assert "opt-in only" in exc.value.reasons["nvml"]
    ctl = get_controller("auto", root=tmp_path / "empty", nvml=FakeNvml(), allow_nvml=True, safety=False)
    assert isinstance(ctl, NvmlController)


def test_dry_run_prints_nvidia_smi_commands():
    nv = FakeNvml()
    out = io.StringIO()
    ctl = NvmlController(nvml=nv, dry_run=True, out=out, power_limit_w=250, safety=False)
    assert ctl.space.gpu_mhz[-1] == 1410 and ctl.space.mem_mhz == (1215.0,)
    ctl.apply(ctl.space.max_mode().replace(gpu_mhz=1005))
    text = out.getvalue()
    assert "nvidia-smi -i 0 --lock-gpu-clocks=1005,1005" in text
    assert "nvidia-smi -i 0 --lock-memory-clocks=1215,1215" in text
    assert "nvidia-smi -i 0 --power-limit=250" in text
    assert nv.calls == []


def test_apply_and_restore(state_dir):
    nv = FakeNvml()
    with NvmlController(nvml=nv, state_dir=state_dir, handle_exit=False, power_limit_w=250) as ctl:
        applied = ctl.apply(ctl.space.max_mode().replace(gpu_mhz=1005))
        assert applied.settled.gpu_mhz == 1005
        assert ("nvmlDeviceSetGpuLockedClocks", 1005, 1005) in nv.calls
        assert nv.power_limit_mw == 250000
    assert nv.gpu_lock is None and nv.mem_lock is None and nv.power_limit_mw == 300000


def test_permission_message(state_dir):
    ctl = NvmlController(nvml=FakeNvml(deny=True), state_dir=state_dir, handle_exit=False)
    with pytest.raises(ModePermissionError, match="needs root"):
        ctl.apply(ctl.space.max_mode())
    ctl._end_session()


def test_factory_drops_keywords_of_other_backends(orin5, state_dir):
    from lightning_edge.devices import JetsonSysfsController, SimModeController

    ctl = get_controller("auto", root=orin5.root, nvml=FakeNvml(), state_dir=state_dir, handle_exit=False)
    assert isinstance(ctl, JetsonSysfsController)
    assert isinstance(get_controller("sim:orin-agx", root=orin5.root, nvml=FakeNvml()), SimModeController)
