"""Overhead of the EnergyProfiler callback on a ResNet-18 Lightning fit on the CPU, and on whole fits.

    python benchmarks/overhead.py                    # ~2-4 minutes on a 2-core machine
    python benchmarks/overhead.py --steps 60 --rounds 5 --out benchmarks/results/overhead.md
    python benchmarks/overhead.py --fit --pairs 5 --out benchmarks/results/overhead_fit.md   # whole-fit ratios

``--fit`` measures what a user feels: the wall time of ``trainer.fit()`` (setup, cost analysis, every step,
tables, figures, reports, TensorBoard writes and the summary included) with ``EnergyProfiler()`` at its defaults
over the same fit without it, for four fits: a 40-step small CNN (7 conv layers, 32x32, batch 16, one epoch),
a ResNet-18, a tiny GPT-style fine-tune called with keyword arguments and dict batches (``transformers``
GPT-2 from a config), and issue 28's 40-batch fit of a small HF-style LM with ``EnergyProfiler(device=
"sim:orin-agx")``. Runs alternate (without, with, without, with, ...) after one warm-up fit of each; the
ratio and the added seconds are taken per pair and the median of the pairs reported, so drifting load on a shared
machine cancels; the rule (issue 28) is checked against the median added time: at most 5 % of the fit without the
profiler or 1 s, whichever is larger. The profiled steps of every measured fit are listed (never 0).

Four configurations, measured side by side in one process and interleaved round by round (so drifting machine
load hits them alike):

* ``none``: no callback, no profiler;
* ``EnergyProfiler()``: the callback with its defaults (every N-th step, N chosen for a 3 % overhead target);
* ``EnergyProfiler(every_n_steps=1)``: every step profiled per layer;
* ``PyTorchProfiler``: Lightning's ``profiler="pytorch"`` equivalent, with its default schedule (wait 1, warmup 1,
  active 3, repeated), writing its trace to a temporary directory.

Step time is taken from ``on_train_batch_start`` of a callback placed first to ``on_train_batch_end`` of one placed
last, so the profiler's own per-step work (attribution, TensorBoard logging) is inside it. The first
``--skip`` steps of every fit are left out (Lightning's warm-up; the callback's input capture and one-time cost
analysis at step 0, reported separately). The *mean* step time includes the profiled steps and is the number the
overhead target is about; the *median* shows a plain step. All runs log to a TensorBoardLogger in a temp dir.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import lightning.pytorch as L  # noqa: E402
from _machine import cpu_model  # noqa: E402
from lightning.pytorch.loggers import TensorBoardLogger  # noqa: E402
from lightning.pytorch.profilers import PyTorchProfiler  # noqa: E402

from lightning_edge import zoo  # noqa: E402
from lightning_edge.lightning.pytorch import EnergyProfiler  # noqa: E402


class LitResNet(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = zoo.get("resnet18").build()

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


class StepStart(L.Callback):
    """Placed first: stamps the start of every step (wall clock and this process's CPU time)."""

    def __init__(self, clock: list) -> None:
        self.clock = clock

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.clock.append((time.perf_counter_ns(), time.process_time_ns()))


class StepEnd(L.Callback):
    """Placed last: records (wall ns, CPU ns) of every step."""

    def __init__(self, starts: list, durations: list) -> None:
        self.starts, self.durations = starts, durations

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        w0, c0 = self.starts[-1]
        self.durations.append((time.perf_counter_ns() - w0, time.process_time_ns() - c0))


CONFIGS = ("none", "EnergyProfiler()", "EnergyProfiler(every_n_steps=1)", "PyTorchProfiler")


def run(config: str, loader: DataLoader, steps: int, tmp: str) -> dict:
    starts: list[int] = []
    durations: list[int] = []
    callbacks: list = [StepStart(starts)]
    profiler = None
    energy = None
    if config == "EnergyProfiler()":
        energy = EnergyProfiler(print_summary=False)
    elif config == "EnergyProfiler(every_n_steps=1)":
        energy = EnergyProfiler(every_n_steps=1, print_summary=False)
    elif config == "PyTorchProfiler":
        profiler = PyTorchProfiler(dirpath=os.path.join(tmp, "pytorch_profiler"), filename="prof")
    if energy is not None:
        callbacks.append(energy)
    callbacks.append(StepEnd(starts, durations))
    torch.manual_seed(0)
    trainer = L.Trainer(max_steps=steps, logger=TensorBoardLogger(tmp, name=config.replace("(", "_").replace(")", "")),
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", devices=1, callbacks=callbacks, profiler=profiler, log_every_n_steps=10)
    t0 = time.perf_counter()
    trainer.fit(LitResNet(), loader)
    wall = time.perf_counter() - t0
    out = {"durations": durations, "wall_s": wall}
    if energy is not None and energy.session is not None:
        s = energy.session
        sch = s.schedule
        out.update(every_n=sch.every_n_steps, profiled=len(s.profiled.get("train", [])),
                   measured_overhead=sch.overhead_fraction(), setup_s=s.budget.spent_s("analysis"),
                   work_s=s.budget.spent_s("attribution"))
    return out


def paired(loader: DataLoader, pairs: int) -> dict:
    """Per-profiled-step cost without Lightning and without fit-to-fit drift: triples (plain, profiled, plain) of
    the same ResNet-18 training step, interleaved; cost = profiled - mean of its two plain neighbours (wall and
    CPU). The profiled step includes the attribution (``EnergySession.flush``), as in the callback."""
    from lightning_edge.lightning.budget import DISPATCH_FACTOR
    from lightning_edge.lightning.session import EnergySession

    torch.manual_seed(0)
    model = zoo.get("resnet18").build()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = next(iter(loader))
    session = EnergySession(model, "none", every_n_steps=1, warmup_steps=1)

    def plain() -> tuple[int, int]:
        w, c = time.perf_counter_ns(), time.process_time_ns()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        return time.perf_counter_ns() - w, time.process_time_ns() - c

    def profiled() -> tuple[int, int]:
        w, c = time.perf_counter_ns(), time.process_time_ns()
        session.step_begin("train", (x, y))
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        session.mark("(backward)", "bwd")
        loss.backward()
        session.mark("(optimizer)")
        opt.step()
        session.step_end("train")
        session.flush()
        return time.perf_counter_ns() - w, time.process_time_ns() - c

    for _ in range(3):
        plain()
        profiled()  # capture step, warm-up
    dw, dc, base_w, base_c = [], [], [], []
    for _ in range(pairs):
        a, b, c = plain(), profiled(), plain()
        dw.append(b[0] - (a[0] + c[0]) / 2)
        dc.append(b[1] - (a[1] + c[1]) / 2)
        base_w.append((a[0] + c[0]) / 2)
        base_c.append((a[1] + c[1]) / 2)
    session.close()
    q = statistics.quantiles
    return {"wall_ms": statistics.median(dw) / 1e6, "cpu_ms": statistics.median(dc) / 1e6,
            "wall_iqr": [v / 1e6 for v in q(dw, n=4)[::2]], "cpu_iqr": [v / 1e6 for v in q(dc, n=4)[::2]],
            "base_wall_ms": statistics.median(base_w) / 1e6, "base_cpu_ms": statistics.median(base_c) / 1e6,
            "hook_estimate_ms": statistics.median(DISPATCH_FACTOR * p.timing.hook_ns
                                                  for p in session.profiled["train"]) / 1e6}


def machine() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    import lightning

    return (f"{cpu_model()}; {os.cpu_count()} logical CPUs; torch {torch.__version__} ({torch.get_num_threads()} threads); "
            f"lightning {lightning.__version__}; Python {platform.python_version()}; {platform.system()} "
            f"{platform.release()}; load average before the run {load}")


# ---------------------------------------------------------------------------------------------- whole fits
class SmallCNN(L.LightningModule):
    """7 conv layers on 32x32 images (issue 17's small CNN)."""

    def __init__(self) -> None:
        super().__init__()
        ch = [3, 16, 16, 32, 32, 64, 64, 64]
        layers: list[nn.Module] = []
        for i in range(7):
            layers += [nn.Conv2d(ch[i], ch[i + 1], 3, padding=1), nn.ReLU()]
            if i in (1, 3, 5):
                layers.append(nn.MaxPool2d(2))
        self.net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


class TinyGPT(L.LightningModule):
    """A GPT-2 of 2 layers from a config (no weights downloaded), called as Hugging Face loops call it."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=2)
        self.model = GPT2LMHeadModel(cfg)

    def training_step(self, batch, batch_idx):
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          labels=batch["input_ids"]).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class _Dicts(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 512, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i])}


class HFLM(L.LightningModule):
    """Issue 28's fit: a small Hugging Face-style LM (GPT-2 from a config) fine-tuned the usual way, no ``forward``,
    ``self.model(**batch).loss``."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        self.model = GPT2LMHeadModel(GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=2, n_positions=64))

    def training_step(self, batch, batch_idx):
        return self.model(**batch).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class _LabelledDicts(_Dicts):
    def __getitem__(self, i: int) -> dict:
        return {**super().__getitem__(i), "labels": self.ids[i]}


def fit_workloads(steps_resnet: int) -> dict:
    """name -> (LightningModule factory, loader, steps, description, EnergyProfiler device)."""
    g = torch.Generator().manual_seed(0)
    out = {}
    n = 40 * 16
    cnn = DataLoader(TensorDataset(torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)),
                     batch_size=16)
    out["small CNN"] = (SmallCNN, cnn, 40, "7 conv layers, 32x32, batch 16, 40 steps = one epoch", "auto")
    n = steps_resnet * 16
    rn = DataLoader(TensorDataset(torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 1000, (n,), generator=g)),
                    batch_size=16)
    out["ResNet-18"] = (LitResNet, rn, steps_resnet, f"zoo ResNet-18, 32x32, batch 16, {steps_resnet} steps", "auto")
    try:
        import transformers  # noqa: F401

        out["tiny GPT-2"] = (TinyGPT, DataLoader(_Dicts(30 * 8, 32), batch_size=8), 30,
                             "transformers GPT-2 (2 layers, d 64) from a config, keyword call, dict batches, "
                             "seq 32, batch 8, 30 steps", "auto")
        out["HF LM on the twin"] = (HFLM, DataLoader(_LabelledDicts(40 * 8, 32), batch_size=8), 40,
                                    "issue 28: GPT-2 (2 layers, d 64) from a config, no forward, model(**batch).loss, "
                                    "seq 32, batch 8, 40 batches; EnergyProfiler(device=\"sim:orin-agx\")",
                                    "sim:orin-agx")
    except ImportError:
        pass
    return out


def fit_once(factory, loader: DataLoader, steps: int, tmp: str, profiled: bool,
             device: str = "auto") -> tuple[float, Any, float]:
    cb = EnergyProfiler(device=device, print_summary=False) if profiled else None
    torch.manual_seed(0)
    model = factory()
    trainer = L.Trainer(max_steps=steps, max_epochs=1, logger=TensorBoardLogger(tmp, name="fit"),
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", devices=1, callbacks=[cb] if cb else [], log_every_n_steps=10)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.fit(model, loader)
    return time.perf_counter() - t0, cb, time.process_time() - c0


def fit_main(args: argparse.Namespace) -> int:
    import logging
    import warnings

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    env = machine()
    wl = fit_workloads(args.resnet_steps)
    if args.only:
        wl = {k: v for k, v in wl.items() if any(o.lower() in k.lower() for o in args.only.split(","))}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (factory, loader, steps, desc, device) in wl.items():
            fit_once(factory, loader, min(steps, 4), tmp, False)  # warm-up of both (imports, first analyze)
            fit_once(factory, loader, min(steps, 4), tmp, True, device)
            ratios, added, base, prof, said, cpu_ratios, costed, nprof = [], [], [], [], [], [], [], []
            for p in range(args.pairs):
                order = (False, True) if p % 2 == 0 else (True, False)
                got = {}
                for profiled in order:
                    got[profiled] = fit_once(factory, loader, steps, tmp, profiled, device)
                (w0, _, c0), (w1, cb, c1) = got[False], got[True]
                ratios.append(w1 / w0)
                added.append(w1 - w0)
                cpu_ratios.append(c1 / c0)
                base.append(w0)
                prof.append(w1)
                o = cb.overhead
                said.append(o.run_overhead_s if o.run_overhead_s is not None else float("nan"))
                skipped = any("cost model skipped" in n for n in cb.session.cost_notes)
                costed.append("skipped (budget)" if skipped else "ran")
                nprof.append(len(cb.session.profiled.get("train", [])))
                print(f"{name} pair {p + 1}: without {w0:.2f} s, with {w1:.2f} s, x{w1 / w0:.3f} (+{w1 - w0:.3f} s; "
                      f"CPU time x{c1 / c0:.3f}); the summary said {said[-1]:.3f} s; {nprof[-1]} profiled steps",
                      flush=True)
            b, a = statistics.median(base), statistics.median(added)
            limit = max(0.05 * b, 1.0)
            rows.append((name, desc, b, statistics.median(prof), statistics.median(ratios), min(ratios), max(ratios),
                         a, limit, statistics.median(said), statistics.median(cpu_ratios),
                         ", ".join(sorted(set(costed))), f"{min(nprof)}-{max(nprof)}" if min(nprof) != max(nprof)
                         else str(nprof[0])))
            print(f"ROW {name}: without {b:.2f} s, with {rows[-1][3]:.2f} s, median ratio x{rows[-1][4]:.3f} "
                  f"({rows[-1][5]:.3f}-{rows[-1][6]:.3f}), added {a:+.3f} s (rule: <= {limit:.2f} s), CPU time "
                  f"x{rows[-1][10]:.3f}, summary said {rows[-1][9]:.3f} s; profiled steps {rows[-1][12]}; "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = ["# EnergyProfiler whole-fit overhead (issues 17, 28)", "",
             f"Command: `python benchmarks/overhead.py --fit --pairs {args.pairs} --resnet-steps {args.resnet_steps}"
             + (f" --threads {args.threads}" if args.threads else "") + (f" --only {args.only}" if args.only else "")
             + "`",
             "", f"Machine: {env}; load average after the run {load}.", "",
             "Wall time of `trainer.fit()` with `EnergyProfiler()` at its defaults (no sensor here, so energies are "
             "estimated; the last fit on the twin, simulated) over the same fit without it. Runs alternate, one "
             "warm-up fit of each first; ratios and added seconds are per pair, the median of the pairs given (the "
             "ratio in bold, with the range). **The rule** (issue 28): the added wall time is at most 5 % of the fit "
             "or 1 s, whichever is larger: *rule* is that bound for the median fit without the profiler. *CPU "
             "ratio*: the same for this process's CPU time (all its threads). *Summary said*: the overhead the "
             "callback measured and printed (median, s). *Cost model*: whether `analyze=\"auto\"` ran the "
             "analysis. *Profiled steps*: training steps profiled per layer in the measured fits (the range over "
             "the pairs).", "",
             "| fit | without (s) | with (s) | wall ratio (median of pairs) | range | added (s) | rule (s) | met | "
             "CPU ratio | summary said (s) | cost model | profiled steps |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, desc, b, p, r, lo, hi, a, limit, said, cr, cm, npf in rows:
        lines.append(f"| {name}: {desc} | {b:.2f} | {p:.2f} | **x{r:.3f}** | {lo:.3f}-{hi:.3f} | {a:+.3f} | "
                     f"{limit:.2f} | {'yes' if a <= limit else 'NO'} | x{cr:.3f} | {said:.3f} | {cm} | {npf} |")
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"written to {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="training steps per fit (default 40)")
    ap.add_argument("--skip", type=int, default=5, help="leading steps of each fit left out (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="fits per configuration, interleaved (default 3)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--image", type=int, default=64, help="image side in pixels (default 64)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    ap.add_argument("--pairs", type=int, default=30, help="(plain, profiled, plain) triples of the paired test")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    ap.add_argument("--fit", action="store_true", help="whole-fit wall-time ratios (see the module docstring)")
    ap.add_argument("--resnet-steps", type=int, default=20, help="--fit: ResNet-18 steps (default 20)")
    ap.add_argument("--only", default="", help="--fit: comma-separated names to run (cnn, resnet, gpt)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.fit:
        return fit_main(args)

    n = args.steps * args.batch_size
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(n, 3, args.image, args.image, generator=g),
                         torch.randint(0, 1000, (n,), generator=g))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=False)
    env = machine()
    import logging
    import warnings

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    results: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    pair = paired(loader, args.pairs)
    print(f"paired: a profiled step costs {pair['wall_ms']:.2f} ms wall, {pair['cpu_ms']:.2f} ms CPU more than a "
          f"plain one ({pair['base_wall_ms']:.1f} ms)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        run("none", loader, min(args.steps, 6), tmp)  # process warm-up (imports, allocator, first analyze)
        run("EnergyProfiler()", loader, min(args.steps, 6), tmp)
        for r in range(args.rounds):
            for c in CONFIGS:
                res = run(c, loader, args.steps, tmp)
                results[c].append(res)
                wall = [d[0] for d in res["durations"][args.skip:]]
                cpu = [d[1] for d in res["durations"][args.skip:]]
                print(f"round {r + 1} {c:<32} CPU mean {statistics.fmean(cpu) / 1e6:8.2f} ms  wall mean "
                      f"{statistics.fmean(wall) / 1e6:8.2f} ms  median {statistics.median(wall) / 1e6:8.2f} ms",
                      flush=True)

    def per_fit(c: str, r: int) -> tuple[float, float, float]:
        d = results[c][r]["durations"][args.skip:]
        return (statistics.fmean(x[1] for x in d), statistics.fmean(x[0] for x in d),
                statistics.median(x[0] for x in d))

    def ratio(c: str, k: int) -> str:
        """Median over rounds of config / none in the same round (drift between rounds cancels), min-max."""
        rs = [per_fit(c, r)[k] / per_fit("none", r)[k] for r in range(args.rounds)]
        return f"**{statistics.median(rs):.3f}** ({min(rs):.2f}-{max(rs):.2f})"

    def absolute(c: str, k: int) -> float:
        return statistics.median(per_fit(c, r)[k] for r in range(args.rounds)) / 1e6

    lines = [
        "# EnergyProfiler overhead: ResNet-18 Lightning fit on the CPU",
        "",
        f"Command: `python benchmarks/overhead.py --steps {args.steps} --rounds {args.rounds} "
        f"--batch-size {args.batch_size} --image {args.image}"
        + (f" --threads {args.threads}" if args.threads else "") + "`",
        "",
        f"Machine: {env}.",
        "",
        f"ResNet-18 (`lightning_edge.zoo`), random {args.image}x{args.image} images, batch {args.batch_size}, SGD, "
        f"{args.steps} steps per fit, the first {args.skip} left out; {args.rounds} rounds, each running the four "
        "configurations one after the other. Step time: `on_train_batch_start` (first callback) to "
        "`on_train_batch_end` (last callback), so the profiler's per-step work is inside it. **Ratios** are per "
        "round (configuration / no callback, in the same round, so drift between rounds cancels): the median over "
        "the rounds in bold, then the range. *CPU* is this process's CPU time per step (`time.process_time_ns`, all "
        "its threads), less sensitive to other jobs on a shared machine than the wall time (both given). *Mean* "
        "includes the profiled steps (what the overhead target is about); *median* is a typical, plain step. "
        "`PyTorchProfiler` is Lightning's with its defaults (torch.profiler schedule wait 1, warmup 1, active 3). "
        "*Overhead it measured* is the callback's own estimate of its per-step overhead (2 x the time inside its "
        "hooks, plus attribution and logging), which drives `every_n_steps=\"auto\"`. No power sensor on this "
        "machine: the energies are `estimated` and the sampler thread does not run (on a Jetson it costs 2-11 % of "
        "one core at 100 Hz - 1 kHz, docs/sensors.md). The ranges show how far apart two fits of the same "
        "configuration can be on a shared machine; the paired measurement below resolves a few percent.",
        "",
        "| configuration | CPU ms/step (mean) | CPU ratio (mean) | wall ratio (mean) | wall ratio (median) | "
        "fit wall s | every N | profiled steps | overhead it measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in CONFIGS:
        extra = results[c][-1]
        every = extra.get("every_n", "")
        prof = extra.get("profiled", "")
        mo = extra.get("measured_overhead")
        mo_s = f"{100 * mo:.1f} %" if isinstance(mo, float) else ""
        wall = statistics.median(r["wall_s"] for r in results[c])
        lines.append(f"| {c} | {absolute(c, 0):.2f} | {ratio(c, 0)} | {ratio(c, 1)} | {ratio(c, 2)} | {wall:.2f} | "
                     f"{every} | {prof} | {mo_s} |")
    every = results["EnergyProfiler()"][-1].get("every_n", 1) or 1
    frac_w = pair["wall_ms"] / pair["base_wall_ms"]
    frac_c = pair["cpu_ms"] / pair["base_cpu_ms"]
    lines += [
        "",
        f"**Paired measurement** (`--pairs {args.pairs}`; no Lightning, no fit-to-fit drift): "
        "(plain, profiled, plain) triples of the same ResNet-18 step, interleaved; a profiled step includes its "
        f"attribution. A profiled step costs **{pair['wall_ms']:.2f} ms** more wall time "
        f"(quartiles {pair['wall_iqr'][0]:.2f} to {pair['wall_iqr'][1]:.2f}) and {pair['cpu_ms']:.2f} ms more CPU "
        f"(quartiles {pair['cpu_iqr'][0]:.2f} to {pair['cpu_iqr'][1]:.2f}) than a plain step of "
        f"{pair['base_wall_ms']:.1f} ms: **{100 * frac_w:.1f} %** ({100 * frac_c:.1f} % CPU) when every step is "
        f"profiled, hence **{100 * frac_w / every:.1f} %** ({100 * frac_c / every:.1f} % CPU) at the N = {every} the "
        f"default chose, before TensorBoard logging (about 1 ms per profiled step, one event). The callback's own "
        f"estimate of a profiled step's extra time (2 x the time inside its hooks) was {pair['hook_estimate_ms']:.2f} "
        "ms.",
    ]
    setup = [r.get("setup_s", 0.0) for r in results["EnergyProfiler()"]]
    lines += [
        "",
        f"One-time costs of the callback, outside the step times: the cost analysis of the captured inputs "
        f"(`lightning_edge.analyze`, {statistics.median(setup):.2f} s per fit; more the first time in a process: "
        "about 60 ms for ResNet-18 once Lightning has imported torch._dynamo, docs/profiler.md) and, per Trainer call, "
        "the figures, the table and the reports; they are in the fit wall time.",
    ]
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
