"""Checks of the CUDA timing and NVML sensing paths on a real NVIDIA GPU. Read-only: it changes no clock, power
limit or other GPU setting, and never resets the GPU.

    python benchmarks/gpu_check.py [--out benchmarks/results/gpu_check.md] [--busy-s 4]

Without a CUDA GPU (or without NVML) it prints why and exits 0 without writing anything: CI has no GPU. On a GPU it
writes a PASS/FAIL table (with the machine and the GPU) and exits 1 if any check fails.

1. ``cuda-index``: ``nvml_index_of_cuda_device`` finds the NVML GPU of ``cuda:0`` (by UUID); names agree.
2. ``nvml-sensor``: ``get_sensor("nvml")`` opens that GPU; idle power in (0, enforced power limit].
3. ``nvml-busy``: the sampler's mean power over a few seconds of matmuls is above idle by >= 10 % and at most the
   enforced limit + 10 %; the energy over the window is that power x its duration.
4. ``cuda-timing``: ``LayerTimer`` on a small CNN on the GPU stamps with CUDA events (``timing.device == "cuda"``),
   the root module's forward time is within [0.8, 1.6] x CUDA events recorded around the same forward (the hooks
   add their own launches, never remove time), self times partition the step, and a training step has backward
   nodes.
5. ``energy-profiler``: a Lightning ``Trainer(accelerator="gpu", devices=1)`` with ``EnergyProfiler(device="nvml")``
   writes TensorBoard event files (read back) with positive ``energy/epoch_j`` and a plausible ``power/epoch_w``,
   labelled ``measured``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _machine import machine  # noqa: E402

RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str) -> bool:
    RESULTS.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    return bool(ok)


def _net(torch):
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.Conv2d(32, 64, 3, padding=1, stride=2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def check_cuda_index(torch, nv) -> int | None:
    from lightning_edge.devices.sensors.nvml import _text, nvml_index_of_cuda_device

    torch.cuda.init()
    idx = nvml_index_of_cuda_device(0, nvml=nv)
    if idx is None:
        check("cuda-index", False, "no NVML GPU has cuda:0's UUID")
        return None
    nv_name = _text(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(idx)))
    cu_name = torch.cuda.get_device_name(0)
    check("cuda-index", nv_name.strip() == cu_name.strip(), f"cuda:0 -> NVML {idx} ({nv_name!r} / {cu_name!r})")
    return idx


def check_nvml(torch, nv, idx: int, busy_s: float) -> tuple[float, float]:
    from lightning_edge.devices.sampler import PowerSampler
    from lightning_edge.devices.sensors import get_sensor

    torch.cuda.set_device(0)
    sensor = get_sensor("nvml", strict=True)
    limit_w = nv.nvmlDeviceGetEnforcedPowerLimit(nv.nvmlDeviceGetHandleByIndex(idx)) / 1e3
    with PowerSampler(sensor) as sampler:
        time.sleep(0.5)
        t0 = time.perf_counter_ns()
        time.sleep(1.5)
        t1 = time.perf_counter_ns()
        idle_w = sampler.mean_power_w(t0, t1)
        check("nvml-sensor", sensor.index == idx and 0 < idle_w <= limit_w,
              f"{sensor.label}; idle {idle_w:.1f} W, enforced limit {limit_w:.0f} W, domain {sensor.energy_domain}")
        a = torch.randn(8192, 8192, device="cuda")
        torch.cuda.synchronize()
        b0 = time.perf_counter_ns()
        while time.perf_counter_ns() - b0 < busy_s * 1e9:
            for _ in range(10):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
        b1 = time.perf_counter_ns()
        sampler.wait_for(b1)
        busy_w = sampler.mean_power_w(b0, b1)
        e = sampler.energy_j(b0, b1)
    ok = busy_w >= 1.1 * idle_w and busy_w <= 1.1 * limit_w and math.isclose(e, busy_w * (b1 - b0) / 1e9, rel_tol=1e-6)
    check("nvml-busy", ok, f"{busy_w:.1f} W over {(b1 - b0) / 1e9:.1f} s of matmuls ({e:.0f} J), idle {idle_w:.1f} W")
    return idle_w, limit_w


def check_timing(torch) -> None:
    from lightning_edge.profiling.hooks import LayerTimer

    model = _net(torch).cuda()
    x = torch.randn(64, 3, 64, 64, device="cuda")
    timer = LayerTimer(model)
    ref, got = [], []
    with torch.no_grad():
        for _ in range(5):
            model(x)
        for _ in range(15):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            model(x)
            e1.record()
            torch.cuda.synchronize()
            ref.append(e0.elapsed_time(e1) * 1e6)
            with timer.step() as s:
                model(x)
            t = s.timing
            root = [iv for iv in t.modules if iv.depth == 0]
            got.append(root[0].duration_ns)
    ratio = statistics.median(got) / statistics.median(ref)
    parts = sum(t.self_times_s().values())
    check("cuda-timing", t.device == "cuda" and 0.8 <= ratio <= 1.6 and math.isclose(parts, t.duration_ns / 1e9, rel_tol=1e-6),
          f"device {t.device}; root forward {statistics.median(got) / 1e6:.3f} ms vs CUDA events "
          f"{statistics.median(ref) / 1e6:.3f} ms (x{ratio:.2f}); self times sum {parts * 1e3:.3f} ms of "
          f"{t.duration_ns / 1e6:.3f} ms")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with timer.step() as s:
        model(x).square().mean().backward()
        opt.step()
    nodes = s.timing.nodes
    check("cuda-backward", len(nodes) > 0 and all(n.duration_ns >= 0 for n in nodes),
          f"{len(nodes)} backward node intervals, {sum(n.duration_ns for n in nodes) / 1e6:.3f} ms")


def check_profiler(torch, idle_w: float, limit_w: float) -> None:
    import lightning.pytorch as L
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_edge.lightning.pytorch import EnergyProfiler

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _net(torch)

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    ds = TensorDataset(torch.randn(2048, 3, 64, 64), torch.randint(0, 10, (2048,)))
    with tempfile.TemporaryDirectory() as d:
        trainer = L.Trainer(accelerator="gpu", devices=1, max_epochs=1, enable_checkpointing=False,
                            enable_progress_bar=False, logger=TensorBoardLogger(d, name="tb"), default_root_dir=d,
                            callbacks=[EnergyProfiler(device="nvml", every_n_steps=1)])
        trainer.fit(Lit(), DataLoader(ds, batch_size=64))
        run = next((Path(d) / "tb").glob("version_*"))
        acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
        acc.Reload()
        tags = acc.Tags()["scalars"]
        epoch_j = acc.Scalars("energy/epoch_j")[-1].value
        epoch_w = acc.Scalars("power/epoch_w")[-1].value
        layer_tags = [t for t in tags if t.startswith("energy/") and t.endswith("_mj")]
        source = json.loads((run / "layers.json").read_text()).get("source")
    ok = epoch_j > 0 and 0.5 * idle_w <= epoch_w <= 1.1 * limit_w and layer_tags and source == "measured"
    check("energy-profiler", ok, f"epoch {epoch_j:.1f} J at {epoch_w:.1f} W, {len(layer_tags)} per-layer energy "
                                 f"tags, source {source!r}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_check.md"))
    ap.add_argument("--busy-s", type=float, default=4.0, help="seconds of matmuls for the busy-power check")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("skipped: no CUDA GPU here (torch.cuda.is_available() is False); nothing written")
        return 0
    from lightning_edge.devices.sensors.nvml import _import_nvml

    nv = _import_nvml()
    if nv is None:
        print("skipped: NVML is not installed (pip install nvidia-ml-py); nothing written")
        return 0
    nv.nvmlInit()
    idx = check_cuda_index(torch, nv)
    idle_w = limit_w = math.nan
    if idx is not None:
        try:
            idle_w, limit_w = check_nvml(torch, nv, idx, args.busy_s)
        except Exception as exc:  # noqa: BLE001 - reported as a failed check
            check("nvml-sensor", False, f"{type(exc).__name__}: {exc}")
    for name, fn in (("cuda-timing", lambda: check_timing(torch)),
                     ("energy-profiler", lambda: check_profiler(torch, idle_w, limit_w))):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            check(name, False, f"{type(exc).__name__}: {exc}")
    gpu = torch.cuda.get_device_name(0)
    lines = ["## GPU checks: CUDA timing and NVML sensing (benchmarks/gpu_check.py)", "",
             f"Machine: {machine()}; GPU {gpu}, CUDA {torch.version.cuda}. Measured (not simulated); read-only.", "",
             "| check | result | detail |", "|---|---|---|"]
    lines += [f"| {n} | {'PASS' if ok else 'FAIL'} | {d} |" for n, ok, d in RESULTS]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"written to {args.out}")
    return 0 if all(ok for _, ok, _ in RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
