"""What a user waits for when the profile store meets trouble (issue 18), as wall time on this machine.

    python benchmarks/store_field.py

1. A fit with PowerModeTuner on the twin (SQLite store) is SIGKILLed mid-profile; the next fit of the same workload
   on the same store: seconds from its start to its first completed profile (the dead run's claim is taken over).
2. Seconds until a one-line error for: a corrupt SQLite file, a PostgreSQL port with nothing listening.

Every power figure involved is the twin's (simulated); the times are wall-clock times of this machine.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lightning.pytorch as L  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from lightning_edge.lightning.pytorch import PowerModeTuner  # noqa: E402
from lightning_edge.tuning.store import ProfileStore, StoreError  # noqa: E402

FAST = dict(settle_s=0.0, warmup_steps=1, min_steps=3, max_steps=5)


class Lit(L.LightningModule):
    def __init__(self, step_sleep: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.step_sleep = step_sleep
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(48, 16), nn.ReLU(), nn.Linear(16, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, i):
        if self.step_sleep:
            time.sleep(self.step_sleep)
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(url: str, step_sleep: float, callbacks=(), max_steps: int = 100000) -> PowerModeTuner:
    cb = PowerModeTuner(25.0, device="sim:orin-agx", store=url, workload_id="bench", window=FAST, baseline=False,
                        print_summary=False)
    data = DataLoader(TensorDataset(torch.randn(64, 3, 4, 4), torch.randint(0, 10, (64,))), batch_size=8)
    L.Trainer(max_steps=max_steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, accelerator="cpu", devices=1, callbacks=[cb, *callbacks]).fit(
        Lit(step_sleep), data)
    return cb


def _victim(url: str) -> None:
    torch.set_num_threads(1)
    _fit(url, 0.2)


def _sim_key() -> str:
    """The twin's key in the store, as the tuner writes it (its model's digest included)."""
    from lightning_edge.devices.board import store_key_of

    return store_key_of("sim:orin-agx")


def kill_and_restart(tmp: Path) -> float:
    url = f"sqlite:///{tmp / 'bench.sqlite3'}"
    proc = mp.get_context("fork").Process(target=_victim, args=(url,), daemon=True)
    proc.start()
    while True:
        if (tmp / "bench.sqlite3").exists():
            st = ProfileStore(url).study(_sim_key(), "bench", "train")
            running = [t for t in st.get_trials(deepcopy=False) if t.state.name == "RUNNING"]
            if running and running[0].system_attrs.get("lightning_edge:claim", {}).get("pid") == proc.pid:
                break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    first: list[float] = []
    cb_ref: list[PowerModeTuner] = []

    class Clock(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, i):
            t = trainer.callbacks[0].tuner
            if t.profiles and not first:
                first.append(time.monotonic())
                trainer.should_stop = True

    t0 = time.monotonic()
    cb_ref.append(_fit(url, 0.0, [Clock()]))
    return first[0] - t0


def error_time(spec: str) -> tuple[float, str]:
    t0 = time.monotonic()
    try:
        ProfileStore(spec)
    except StoreError as exc:
        return time.monotonic() - t0, str(exc)
    raise AssertionError(f"{spec} opened")


def main() -> None:
    from benchmarks._machine import machine

    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        restart_s = kill_and_restart(tmp)
        bad = tmp / "corrupt.sqlite3"
        bad.write_bytes(os.urandom(8192))
        corrupt_s, corrupt_msg = error_time(str(bad))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        pg_s, pg_msg = error_time(f"postgresql://edge@127.0.0.1:{port}/profiles")
    print(f"machine: {machine()}; load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("| situation | wall time (s) | what the user sees |")
    print("|---|---|---|")
    print(f"| next fit after a SIGKILL mid-profile: start to first profile | {restart_s:.2f} | the dead run's claim "
          "is taken over at once (was: 600 s at step 0, then TimeoutError) |")
    print(f"| corrupt SQLite store | {corrupt_s:.3f} | {corrupt_msg.replace(str(tmp), '<tmp>')} |")
    print(f"| PostgreSQL port with nothing listening | {pg_s:.3f} | {pg_msg} |")


if __name__ == "__main__":
    main()
