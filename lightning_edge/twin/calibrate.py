"""Fit the twin's coefficients to the spec's figures and write ``lightning_edge/data/orin-agx-twin.json``.

    python -m lightning_edge.twin.calibrate [--out DIR] [--start PROFILE] [--defaults] [--max-nfev N] [--skip-roofline]

Two stages, both weighted least squares on relative errors (scipy, needed only here):

1. the time roofline (peak and bandwidth functions of the GPU and EMC clocks) against Pagoda's table,
   balance points and ranges over its 96 sampled modes;
2. everything else (energy, static power, CPU side, kernel efficiencies, data loader) against the energy
   roofline figures, every workload row and the response-shape facts, with the roofline held fixed.

The runtime never imports this module; the twin reads the JSON it writes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
from pathlib import Path

import numpy as np

from lightning_edge import catalog
from lightning_edge.twin import validation as V
from lightning_edge.twin.physics import DEFAULT_PARAMS, PARAM_DOCS, Physics

ROOF_PARAMS = {  # name: (low, high)
    "peak_core_tflops_per_ghz": (8.0, 30.0), "peak_mem_tflops": (5.0, 200.0), "peak_mem_exp": (0.5, 4.0),
    "peak_softmin_k": (0.7, 12.0), "bw_gpu_gbs_per_ghz": (60.0, 800.0), "bw_dram_eff": (0.5, 1.0),
    "bw_mem_exp": (0.5, 2.5), "bw_softmin_k": (0.7, 12.0),
}

REST_PARAMS = {
    "gpu_v_min": (0.6, 0.97), "e_flop_tc_pj": (0.5, 6.0), "e_flop_cuda_pj": (3.0, 40.0),
    "e_flop_dw_pj": (1.0, 40.0), "e_flop_elt_pj": (1.0, 30.0),
    "p_gpu_active_w": (2.0, 25.0), "p_gpu_on_w": (0.0, 8.0), "gpu_stall_frac": (0.0, 1.0),
    "e_byte_pj": (10.0, 150.0), "p_mem_active_w": (1.0, 15.0), "p_mem_active_floor_w": (0.3, 8.0),
    "p_mem_active_exp": (0.3, 4.0),
    "p_base_w": (4.0, 12.0), "p_core_leak_w": (0.02, 0.4), "p_core_clock_w": (0.02, 0.6),
    "p_gpu_idle_leak_w": (0.0, 4.0), "p_gpu_idle_clock_w": (0.2, 6.0), "p_emc_idle_w": (0.3, 9.0),
    "p_emc_idle_exp": (0.2, 2.5), "p_core_busy_w": (0.4, 3.5), "spin_util": (0.1, 1.0),
    "t_op_us": (20.0, 150.0), "t_module_us": (1.0, 40.0), "t_internal_us": (2.0, 40.0), "t_sync_us": (10.0, 200.0),
    "cpu_mem_sens": (0.0, 0.5), "k_overhead_us": (1.0, 15.0),
    "eff_tc": (0.1, 0.9), "eff_cuda": (0.15, 0.95), "eff_dw": (0.01, 0.5), "eff_elt": (0.05, 0.6),
    "eff_mem": (0.4, 1.0), "half_mflop": (1.0, 400.0), "half_mbyte": (0.01, 10.0), "half_reduction": (0.0, 600.0),
    "t_decode_train_ms_per_mpix": (20.0, 400.0), "t_fetch_ms_per_mb": (0.0, 3.0),
}


def _roof_residuals(phys: Physics) -> np.ndarray:
    r = []
    pk = lambda g, m: phys.peak_flops(g, m) / 1e12  # noqa: E731
    bw = lambda g, m: phys.bandwidth(g, m) / 1e9  # noqa: E731
    for (g, m), p, b, bal in (((1300.5, 3199), 14.7, 164.4, 89.4), ((1134.75, 3199), 13.7, 159.1, 85.9),
                              ((726.75, 3199), 9.5, 141.3, 67.0), ((318.75, 3199), None, None, 69.1),
                              ((1300.5, 2133), 11.4, 103.9, 109.9), ((1300.5, 665.6), None, None, 88.1)):
        if p is not None:
            r += [3 * math.log(pk(g, m) / p), 3 * math.log(bw(g, m) / b)]
        r.append(3 * math.log(pk(g, m) / bw(g, m) * 1e3 / bal))
    gs = np.array([318.75, 726.75, 1134.75, 1300.5])
    ms = np.array([665.6, 2133.0, 3199.0])
    G, M = np.meshgrid(gs, ms)
    P, B = pk(G, M), bw(G, M)
    for arr, lo, hi in ((P, 3.4, 14.8), (B, 35.9, 164.4), (P / B * 1e3, 66.7, 113.3)):
        r += [math.log(arr.min() / lo), 0.5 * math.log(arr.max() / hi)]
    # physical: achievable DRAM bandwidth never above the theoretical one
    r.append(5 * max(0.0, phys.p["bw_dram_eff"] - 0.95))
    return np.array(r, dtype=float)


def fit_roofline(params: dict) -> dict:
    from scipy.optimize import least_squares

    names = list(ROOF_PARAMS)
    lo = np.array([ROOF_PARAMS[n][0] for n in names])
    hi = np.array([ROOF_PARAMS[n][1] for n in names])
    x0 = np.clip(np.array([params[n] for n in names]), lo, hi)

    def f(x):
        p = dict(params)
        p.update(zip(names, x))
        return _roof_residuals(Physics(p))

    rng = np.random.default_rng(0)
    starts = [x0] + [lo + (hi - lo) * rng.random(len(x0)) for _ in range(40)]
    best = min((least_squares(f, s, bounds=(lo, hi), x_scale="jac") for s in starts), key=lambda res: res.cost)
    out = dict(params)
    out.update(zip(names, best.x))
    return out


class _Objective:
    """Residuals of every non-roofline target; the twin's ModelCosts are computed once and reused."""

    def __init__(self, twin):
        self.twin = twin
        self.ps = V.pagoda_sample_space()
        self.fs = catalog.fulcrum_space()
        sp = catalog.orin_agx_space()
        self.coarse = sp.subspace(cores=(1, 2, 3, 4, 12), cpu_mhz=sp.cpu_mhz[::2] + (sp.cpu_mhz[-1],), name="coarse")
        self.corner = sp.subspace(cores=(1, 2, 3), gpu_mhz=sp.gpu_mhz[-5:], mem_mhz=(204.0, 665.6), name="corner")
        for _label, model, bs, kind, mode, seq, *_ in V.WORKLOAD_ROWS:  # warm the caches
            twin.predict_workload(model, bs, kind, mode, seq_len=seq)

    def __call__(self, params: dict) -> np.ndarray:
        tw = self.twin
        tw.physics = Physics(params)
        r: list[float] = []

        def rel(value, target, tol, w=1.0):
            """Pulls towards the target, and hard beyond 90 % of the tolerance."""
            e = math.log(max(value, 1e-30) / target) / math.log(1 + tol)
            r.extend([0.5 * w * e, 4 * w * max(0.0, abs(e) - 0.9)])

        def pts(value, target, tol, w=1.0):
            e = (value - target) / tol
            r.extend([0.5 * w * e, 4 * w * max(0.0, abs(e) - 0.9)])

        M = V.MAXN
        # --- energy roofline
        rm = tw.roofline(M)
        rel(rm.eps_flop * 1e12, 3.86, 0.10)
        rel(rm.eps_mop * 1e12, 141.38, 0.10)
        rel(rm.static_power, 17.9, 0.10)
        for m, tgt in ((665.6, 444.9), (2133.0, 174.7)):
            rel(tw.roofline(M.replace(mem_mhz=m)).eps_mop * 1e12, tgt, 0.10)
        r96 = tw.roofline(self.ps)
        ef = np.asarray(r96.eps_flop)
        k = self.ps.to_numpy()
        med = {g: float(np.median(ef[k[:, 2] == g])) for g in self.ps.gpu_mhz}
        others = min(v for g, v in med.items() if g != 726.75)
        r.append(20 * max(0.0, med[726.75] / others - 0.99))
        ee = np.asarray(r96.peak_energy_efficiency(True))
        sel = (k[:, 2] == 726.75) & (k[:, 3] == 2133.0)
        r.append(60 * max(0.0, ee[~sel].max() / ee[sel].max() - 0.995))
        e8 = tw.roofline(V.PowerMode(8, 1651.2, 726.75, 2133.0)).peak_energy_efficiency(True)
        pts(100 * (e8 / rm.peak_energy_efficiency(True) - 1), 2.4, 2.0)
        # --- workload rows
        for _label, model, bs, kind, mode, seq, t_tgt, p_tgt, _ in V.WORKLOAD_ROWS:
            pr = tw.predict_workload(model, bs, kind, mode, seq_len=seq)
            rel(float(pr.time_s), t_tgt, 0.25, 1.5)
            rel(float(pr.power_w), p_tgt, 0.25, 1.5)
        # --- GPU lowering (inference bs 1)
        gl = [1300.5, 1134.75, 726.75, 318.75]
        for model, t_tgt, e_tgt in (("mobilenet_v3_large", None, (6.0, 11.5, 15.4)),
                                    ("resnet50", (1.8, 7.0, 24.0), (4.0, 10.0, 5.0))):
            pr = tw.predict_workload(model, 1, "infer", [M.replace(gpu_mhz=g) for g in gl])
            t, e = np.asarray(pr.time_s), np.asarray(pr.energy_j)
            dt = 100 * (t[1:] / t[0] - 1)
            de = 100 * (1 - e[1:] / e[0])
            for i in range(3):
                if t_tgt is None:
                    r.append(4 * max(0.0, dt[i] - 0.7) / 0.3)
                else:
                    pts(dt[i], t_tgt[i], 5.0)
                pts(de[i], e_tgt[i], 5.0)
        pr = tw.predict_workload("resnet50", 1, "infer", [M, M.replace(mem_mhz=2133.0), M.replace(mem_mhz=665.6)])
        t, p = np.asarray(pr.time_s), np.asarray(pr.power_w)
        pts(100 * (t[1] / t[0] - 1), 7.3, 5.0)
        pts(100 * (t[2] / t[0] - 1), 41.5, 10.0)
        for i in (1, 2):
            save = 100 * (1 - p[i] / p[0])
            r += [2 * max(0.0, save - 2.5), 2 * max(0.0, -save)]
        # --- slope ratios (high direction), Fulcrum's low power
        rho = V.slope_ratios(tw, "high")
        for kk, tgt in (("mem", 8.93), ("gpu", 1.8), ("cpu", 1.59)):
            rel(max(rho[kk], 1e-3), tgt, 0.5)
        r.append(max(0.0, rho["cores"] - 0.1))
        r += [10 * max(0.0, 1.1 - rho["gpu"] / rho["cpu"]), 10 * max(0.0, 1.5 - rho["mem"] / rho["gpu"])]
        pf = np.asarray(tw.predict_workload("resnet18", 16, "train", self.fs).power_w)
        rel(pf.min(), 14.7, 0.25)
        rel(pf.max(), 50.0, 0.25)
        # --- monotone power along the knobs for ResNet-18 training (a coarse grid with every GPU and EMC value)
        grid = np.asarray(tw.predict_workload("resnet18", 16, "train", self.coarse).power_w).reshape(self.coarse.shape)
        for ax in range(4):
            d = np.diff(grid, axis=ax)
            r.append(20 * float(np.clip(-d + 0.002, 0, None).sum()))
        grid = np.asarray(tw.predict_workload("resnet18", 16, "train", self.corner).power_w).reshape(self.corner.shape)
        for ax in range(4):
            d = np.diff(grid, axis=ax)
            r.append(20 * float(np.clip(-d + 0.002, 0, None).sum()))
        return np.array(r, dtype=float)


#: the coefficients of the GPU's kernels and the CPU's dispatch: what a change of the workload model (not of the
#: board's energy) refits (``--only kernels``)
KERNEL_PARAMS = ("eff_tc", "eff_cuda", "eff_dw", "eff_elt", "eff_mem", "half_mflop", "half_mbyte", "half_reduction",
                 "k_overhead_us", "t_op_us", "t_module_us", "t_internal_us", "t_sync_us", "cpu_mem_sens")


def fit_rest(params: dict, twin, max_nfev: int = 400, only: tuple[str, ...] | None = None) -> dict:
    """Fit every non-roofline coefficient (``only``: these of them, the others held) to the targets."""
    from scipy.optimize import least_squares

    obj = _Objective(twin)
    names = [n for n in REST_PARAMS if only is None or n in only]
    unknown = set(only or ()) - set(REST_PARAMS)
    if unknown:
        raise ValueError(f"not fitted here: {sorted(unknown)}; the non-roofline coefficients are {list(REST_PARAMS)}")
    lo = np.array([REST_PARAMS[n][0] for n in names])
    hi = np.array([REST_PARAMS[n][1] for n in names])
    x0 = np.clip(np.array([params[n] for n in names]), lo + 1e-9, hi - 1e-9)

    def f(x):
        p = dict(params)
        p.update(zip(names, x))
        return obj(p)

    res = least_squares(f, x0, bounds=(lo, hi), x_scale="jac", max_nfev=max_nfev, diff_step=1e-3)
    out = dict(params)
    out.update(zip(names, res.x))
    return out


class _floats:
    """A Roofline's coefficients as plain floats (for JSON)."""

    def __init__(self, roof):
        for k in ("peak_flops", "bandwidth", "eps_flop", "eps_mop", "static_power"):
            setattr(self, k, float(np.asarray(getattr(roof, k))))


def profile_dict(params: dict, twin) -> dict:
    """The device-profile JSON (``source: simulated``) with the fitted coefficients in ``fit``."""
    space = catalog.orin_agx_space()
    named = [V.MAXN, V.MAXN.replace(gpu_mhz=1134.75), V.MAXN.replace(gpu_mhz=726.75),
             V.MAXN.replace(gpu_mhz=318.75), V.MAXN.replace(mem_mhz=2133.0), V.MAXN.replace(mem_mhz=665.6),
             V.MID, V.LOW]
    modes = []
    for m in named:
        r32, r16, rc = (_floats(twin.roofline(m, p)) for p in ("fp32", "fp16", "fp32_cuda"))
        modes.append({
            "mode": str(m),
            "precision": {
                "fp32": {"peak_flops": r32.peak_flops, "bandwidth": r32.bandwidth,
                         "note": "TF32 tensor cores (PyTorch FP32 convolutions; Pagoda's roofline)"},
                "fp16": {"peak_flops": r16.peak_flops, "bandwidth": r16.bandwidth, "eps_flop": r16.eps_flop,
                         "eps_mop": r16.eps_mop},
                "fp32_cuda": {"peak_flops": rc.peak_flops, "bandwidth": rc.bandwidth, "eps_flop": rc.eps_flop,
                              "note": "CUDA cores, tensor cores off (PyTorch FP32 matmuls by default)"},
            },
            "eps_flop": r32.eps_flop, "eps_mop": r32.eps_mop, "static_power_w": r32.static_power,
            "source": "simulated",
            "note": "evaluated from the fit section; the twin computes any of the 18,096 modes the same way",
        })
    return {
        "schema": "lightning_edge.device_profile", "version": 1, "device": "jetson-orin-agx-32gb",
        "source": "simulated",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": {"what": "the lightning_edge Orin AGX twin (simulated): coefficients fitted to published figures",
                 "calibrated_against": "docs/twin-targets.md (Pagoda and Fulcrum, docs/references.md)",
                 "regenerate": "python -m lightning_edge.twin.calibrate"},
        "mode_space": {"cores": list(space.cores), "cpu_mhz": list(space.cpu_mhz), "gpu_mhz": list(space.gpu_mhz),
                       "mem_mhz": list(space.mem_mhz)},
        "modes": modes,
        "fit": {
            "model": "lightning_edge.twin.physics/1",
            "label": "simulated",
            "params": {k: float(params.get(k, DEFAULT_PARAMS[k])) for k in DEFAULT_PARAMS},
            "docs": PARAM_DOCS,
            "equations": "docs/twin.md",
        },
        "notes": ["source 'simulated': every number here comes from the twin's model, not from a board",
                  "modes lists a few named modes for reference; OrinTwin evaluates any mode from fit.params"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).resolve().parents[1] / "data" / "orin-agx-twin.json"
    ap.add_argument("--out", default=str(here))
    ap.add_argument("--start", default=None, help="start from this profile's fit.params (default: the shipped one)")
    ap.add_argument("--defaults", action="store_true", help="start from physics.DEFAULT_PARAMS")
    ap.add_argument("--max-nfev", type=int, default=400)
    ap.add_argument("--skip-roofline", action="store_true")
    ap.add_argument("--only", default=None,
                    help="fit only these coefficients (comma-separated names, or 'kernels': the GPU kernels' and CPU "
                         "dispatch's), the others held at their start values")
    args = ap.parse_args(argv)
    only = None
    if args.only:
        only = tuple(n for part in args.only.split(",") for n in (KERNEL_PARAMS if part == "kernels" else (part,)))
    from lightning_edge.twin.model import OrinTwin, load_twin_params

    params = dict(DEFAULT_PARAMS)
    if not args.defaults:
        try:
            params.update(load_twin_params(args.start)[0])
        except (FileNotFoundError, ValueError):
            pass
    if not args.skip_roofline:
        params = fit_roofline(params)
        print("roofline residuals:", np.round(_roof_residuals(Physics(params)), 3))
    twin = OrinTwin(params, profile_path=False)
    params = fit_rest(params, twin, args.max_nfev, only)
    twin.physics = Physics(params)
    data = profile_dict(params, twin)
    Path(args.out).write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
