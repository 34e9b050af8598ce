"""Wall time and peak extra memory of lightning_edge.analyze versus fvcore and FlopCounterMode.

Every zoo model, forward, batch 1 and 64. Each measurement runs in a fresh process so that its peak
memory (ru_maxrss minus the resident size before the call) is its own.

* lightning_edge.analyze: model built on the meta device (what analyze needs; nothing materialised).
* FlopCounterMode: the same meta model (it runs the model, which on meta computes nothing).
* fvcore FlopCountAnalysis: JIT-traces the model. It is tried on the meta model first; where tracing on
  meta fails (shape checks on tensors), it runs the way its users run it: a real CPU model and real inputs.
  The "how" column says which.

Totals are shown side by side: ours as FLOP (2 x MAC + bias + element-wise), FlopCounterMode as FLOP
(2 x MAC of products/convs/attention), fvcore as its "flops", which are MACs of the ops it knows.

    python benchmarks/analyze_speed.py [--models resnet18,bert_large] [--batch-sizes 1,64] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _machine import machine

CHILD = r"""
import json, resource, sys, time, warnings, statistics
warnings.simplefilter("ignore")
import torch
from lightning_edge import analyze, zoo
tool, name, bs, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(2)

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20

def build(device):
    e = zoo.get(name)
    m = e.build(device=device).eval()
    kw = {"batch_size": bs, "device": device}
    return m, tuple(e.inputs(**kw))

how = "meta"
if tool == "analyze":
    model, inputs = build(torch.device("meta"))
    run = lambda: analyze(model, *inputs).flops
elif tool == "flop_counter":
    from torch.utils.flop_counter import FlopCounterMode
    model, inputs = build(torch.device("meta"))
    def run():
        fc = FlopCounterMode(display=False)
        with fc, torch.no_grad():
            model(*inputs)
        return fc.get_total_flops()
else:
    from fvcore.nn import FlopCountAnalysis
    def fv(model, inputs):
        a = FlopCountAnalysis(model, inputs)
        a.unsupported_ops_warnings(False); a.uncalled_modules_warnings(False)
        return a.total()
    model, inputs = build(torch.device("meta"))
    try:
        with torch.no_grad():
            fv(model, inputs)
    except Exception:
        how = "cpu (real run)"
        model, inputs = build(torch.device("cpu"))
    def run():
        with torch.no_grad():
            return fv(model, inputs)

base = rss_mb()
times = []
total = None
for i in range(repeats):
    t = time.perf_counter()
    total = run()
    times.append(time.perf_counter() - t)
    if times[-1] > 20:
        break
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"tool": tool, "model": name, "batch_size": bs, "how": how, "first_s": times[0],
                  "median_s": statistics.median(times[1:] or times), "extra_mb": max(0.0, peak - base),
                  "total": total}))
"""


def measure(tool: str, name: str, bs: int, repeats: int) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, tool, name, str(bs), str(repeats)],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        return {"tool": tool, "model": name, "batch_size": bs, "error": r.stderr.strip().splitlines()[-1][:120]}
    return json.loads(r.stdout.strip().splitlines()[-1])



def main() -> int:
    from lightning_edge import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(zoo.names()))
    ap.add_argument("--batch-sizes", default="1,64")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "analyze_speed.md"))
    args = ap.parse_args()

    rows = []
    for name in args.models.split(","):
        for bs in (int(b) for b in args.batch_sizes.split(",")):
            res = {t: measure(t, name, bs, args.repeats) for t in ("analyze", "flop_counter", "fvcore")}
            rows.append((name, bs, res))
            a, f, v = res["analyze"], res["flop_counter"], res["fvcore"]
            print(f"{name:20s} bs {bs:3d}  analyze {a.get('median_s', float('nan')):7.3f}s "
                  f"{a.get('extra_mb', float('nan')):6.0f}MB | FlopCounterMode {f.get('median_s', float('nan')):7.3f}s | "
                  f"fvcore {v.get('median_s', float('nan')):7.3f}s ({v.get('how', v.get('error'))})", flush=True)

    def cell(r, key, fmt):
        return fmt.format(r[key]) if key in r else "error"

    lines = [
        "## analyze speed (benchmarks/analyze_speed.py)",
        "",
        f"Machine: {machine()}. Forward pass, eval mode. Time: median of repeated calls after the first "
        "(first call in brackets); memory: peak RSS growth during the calls, each tool in its own process.",
        "",
        "| model | batch | analyze s | analyze MB | FlopCounterMode s | FlopCounterMode MB | fvcore s | fvcore MB "
        "| fvcore ran on | analyze GFLOP | FlopCounterMode GFLOP | fvcore G(MAC) | faster than fvcore |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, bs, res in rows:
        a, f, v = res["analyze"], res["flop_counter"], res["fvcore"]
        faster = ("yes" if a.get("median_s", 1e9) < v.get("median_s", 0) else "NO") if "median_s" in v else "n/a"
        lines.append(
            f"| {name} | {bs} | {cell(a, 'median_s', '{:.3f}')} ({cell(a, 'first_s', '{:.2f}')}) | "
            f"{cell(a, 'extra_mb', '{:.0f}')} | {cell(f, 'median_s', '{:.3f}')} | {cell(f, 'extra_mb', '{:.0f}')} | "
            f"{cell(v, 'median_s', '{:.3f}')} | {cell(v, 'extra_mb', '{:.0f}')} | {v.get('how', v.get('error', ''))} | "
            f"{a['total'] / 1e9:.2f} | {f['total'] / 1e9:.2f} | "
            f"{(v['total'] / 1e9) if 'total' in v else float('nan'):.2f} | {faster} |"
        )
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
