"""Screenshots of the TensorBoard dashboards an EnergyProfiler run writes, taken in headless Chromium (issue 28).

    python benchmarks/tensorboard_screens.py --out screens/            # a short twin run, then its dashboards
    python benchmarks/tensorboard_screens.py --logdir runs/ --out screens/   # an existing log dir

It starts ``tensorboard --logdir`` on a free port, reads what the dashboards read (TensorBoard's HTTP data API:
``/data/plugin/scalars/tags``, ``/data/plugin/images/tags``, ``/data/plugin/custom_scalars/layout``), and saves one
PNG per tab (``timeseries``, ``scalars``, ``custom_scalars``, ``images``, ``text``) with
``chromium --headless --screenshot``, plus the layer chart itself at its own size (``layers_<stage>.png``, as
TensorBoard shows it when asked for the actual image size). ``screens.json`` lists the files, each screenshot's
pixel spread (a blank page has none) and the tags. Needs Chromium (``apt-get install chromium``) and TensorBoard;
the test ``tests/lightning/test_tensorboard_screens.py`` (slow) runs it and skips without Chromium.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

TABS = ("timeseries", "scalars", "custom_scalars", "images", "text")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(port: int, route: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}{route}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read().decode())


def get_bytes(port: int, route: str, **params: str) -> bytes:
    url = f"http://127.0.0.1:{port}{route}" + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


class TensorBoard:
    """``tensorboard --logdir`` on a free port of 127.0.0.1 (a context manager; stopped on exit)."""

    def __init__(self, logdir: str | os.PathLike[str], timeout_s: float = 60.0) -> None:
        self.logdir = str(logdir)
        self.port = free_port()
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> TensorBoard:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", self.logdir, "--port", str(self.port),
             "--host", "127.0.0.1", "--reload_interval", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                runs = get_json(self.port, "/data/runs")
                if runs and get_json(self.port, "/data/plugin/scalars/tags"):
                    return self
            except OSError:
                pass
            time.sleep(0.5)
        self.__exit__()
        raise TimeoutError(f"tensorboard did not serve {self.logdir} within {self.timeout_s:g} s")

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def screenshot(chromium: str, url: str, path: str | os.PathLike[str], size: tuple[int, int] = (1600, 1200),
               wait_ms: int = 12000, timeout_s: float = 90.0) -> Path:
    """One headless Chromium screenshot of ``url`` (``wait_ms`` of virtual time for the page's requests)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
           "--no-first-run", f"--virtual-time-budget={wait_ms}", f"--window-size={size[0]},{size[1]}",
           f"--screenshot={path}", url]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s, check=False)
    if not path.exists():
        raise RuntimeError(f"chromium wrote no screenshot of {url}")
    return path


def pixel_spread(path: str | os.PathLike[str]) -> float:
    """The standard deviation of the image's grey levels (0 for a blank page)."""
    from PIL import Image, ImageStat

    with Image.open(path) as im:
        return float(ImageStat.Stat(im.convert("L")).stddev[0])


def dashboards(tb: TensorBoard) -> dict[str, Any]:
    """What the dashboards read: scalar, image and text tags per run and the custom-scalars layout."""
    return {"scalars": get_json(tb.port, "/data/plugin/scalars/tags"),
            "images": get_json(tb.port, "/data/plugin/images/tags"),
            "text": get_json(tb.port, "/data/plugin/text/tags"),
            "custom_scalars": get_json(tb.port, "/data/plugin/custom_scalars/layout")}


def take(logdir: str | os.PathLike[str], out: str | os.PathLike[str], chromium: str | None = None,
         size: tuple[int, int] = (1600, 1200)) -> dict[str, Any]:
    """Screenshots of every tab and the layer charts of ``logdir``; returns (and writes to ``screens.json``) the
    files, their pixel spread and the dashboards' tags."""
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("no Chromium (apt-get install chromium)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with TensorBoard(logdir) as tb:
        data = dashboards(tb)
        shots = {}
        for tab in TABS:
            p = screenshot(chromium, f"http://127.0.0.1:{tb.port}/#{tab}", out / f"{tab}.png", size)
            shots[tab] = {"file": str(p), "spread": pixel_spread(p)}
        for run, tags in data["images"].items():  # the layer charts at their own size
            for tag in tags:
                if not tag.startswith("layers/"):
                    continue
                series = get_json(tb.port, "/data/plugin/images/images", run=run, tag=tag)
                if not series:
                    continue
                q = urllib.parse.parse_qs(series[-1]["query"])
                png = get_bytes(tb.port, "/data/plugin/images/individualImage",
                                **{k: v[0] for k, v in q.items()})
                p = out / f"{tag.replace('/', '_')}.png"
                p.write_bytes(png)
                shots[tag] = {"file": str(p), "spread": pixel_spread(p)}
    doc = {"logdir": str(logdir), "screens": shots, "dashboards": data}
    (out / "screens.json").write_text(json.dumps(doc, indent=1))
    return doc


def short_run(root: str | os.PathLike[str], steps: int = 8) -> str:
    """A short fit on the twin (a small CNN, a few seconds) with a TensorBoardLogger; returns its log dir."""
    import lightning.pytorch as L
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_edge.lightning.pytorch import EnergyProfiler

    class Net(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                     nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                     nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 64), nn.ReLU(),
                                     nn.Linear(64, 10))

        def training_step(self, batch: Any, i: int) -> Any:
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(16 * steps, 3, 32, 32, generator=g), torch.randint(0, 10, (16 * steps,),
                                                                                        generator=g))
    logger = TensorBoardLogger(str(root), name="short")
    trainer = L.Trainer(max_steps=steps, logger=logger, callbacks=[EnergyProfiler(device="sim:orin-agx",
                                                                                  print_summary=False)],
                        accelerator="cpu", devices=1, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, log_every_n_steps=2, default_root_dir=str(root))
    trainer.fit(Net(), DataLoader(ds, batch_size=16))
    return str(logger.log_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--logdir", help="a TensorBoard log dir (default: make a short twin run under --out)")
    p.add_argument("--out", default="tensorboard_screens", help="where the PNGs and screens.json go")
    p.add_argument("--steps", type=int, default=8, help="batches of the short run (default 8)")
    p.add_argument("--size", default="1600x1200", help="browser window, WxH (default 1600x1200)")
    a = p.parse_args(argv)
    w, h = (int(v) for v in a.size.lower().split("x"))
    logdir = a.logdir or short_run(Path(a.out) / "logs", a.steps)
    doc = take(logdir, a.out, size=(w, h))
    for name, s in doc["screens"].items():
        print(f"{name:24s} {s['file']}  (pixel spread {s['spread']:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
