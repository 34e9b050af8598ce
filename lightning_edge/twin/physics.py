"""The twin's device physics: smooth functions of the four knobs, vectorised over numpy arrays.

Every function takes knob arrays (MHz; cores as numbers) that broadcast together and returns SI units
(FLOP/s, B/s, W, J/FLOP, J/B, s). The coefficients live in ``lightning_edge/data/orin-agx-twin.json``
(``fit.params``); :data:`DEFAULT_PARAMS` is only the starting point of the calibration
(``python -m lightning_edge.twin.calibrate``). docs/twin.md derives each equation.

Reference knobs: MAXN = 12 cores, 2201.6 MHz CPU, 1300.5 MHz GPU, 3199 MHz memory (EMC).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["DEFAULT_PARAMS", "PARAM_DOCS", "POSITIVE_PARAMS", "FRACTION_PARAMS", "param_problem", "Physics", "F_CPU_MAX", "F_GPU_MAX", "F_MEM_MAX", "DRAM_PEAK_BPS",
           "GPU_SMS"]

F_CPU_MAX = 2201.6
F_GPU_MAX = 1300.5
F_MEM_MAX = 3199.0
DRAM_PEAK_BPS = 204.8e9
"""LPDDR5, 256-bit at 3199 MHz EMC: the theoretical bandwidth (scales with the EMC clock)."""
GPU_SMS = 16
"""Streaming multiprocessors of the Orin AGX's Ampere GPU: 2048 CUDA cores and 64 tensor cores (Pagoda, Table 2), 128
and 4 per SM. A matmul smaller than one tile per SM cannot keep the others busy."""

PARAM_DOCS: dict[str, str] = {
    # --- time roofline: peak = softmin_k(core side, memory-feed side)
    "peak_core_tflops_per_ghz": "TF32 tensor-core throughput per GHz of GPU clock (compute side of the peak)",
    "peak_mem_tflops": "memory-feed limit of the matmul benchmark at 3199 MHz EMC (TFLOP/s)",
    "peak_mem_exp": "exponent of the memory-feed limit in the EMC clock",
    "peak_softmin_k": "sharpness of the soft minimum of the two peak limits",
    "bw_gpu_gbs_per_ghz": "bandwidth the GPU can issue per GHz of GPU clock (GB/s/GHz)",
    "bw_dram_eff": "achievable fraction of the theoretical DRAM bandwidth at 3199 MHz",
    "bw_mem_exp": "exponent of the achievable DRAM bandwidth in the EMC clock",
    "bw_softmin_k": "sharpness of the soft minimum of the two bandwidth limits",
    "dram_bus_bits": "memory bus width (bits), a hardware fact: the theoretical DRAM bandwidth is "
                     "DRAM_PEAK_BPS x bits / 256 at 3199 MHz EMC (the papers' board: 256)",
    "fp16_peak_ratio": "FP16 tensor-core peak / TF32 peak (Pagoda MAXN: 33.0 / 14.7)",
    "fp16_bw_ratio": "FP16 benchmark bandwidth / FP32 (Pagoda MAXN: 159.7 / 164.4)",
    "cuda_fp32_ratio": "CUDA-core FP32 peak / TF32 tensor peak (Pagoda: 3.49 / 14.7)",
    # --- voltage curves (relative to the voltage at the top frequency)
    "gpu_v_min": "GPU voltage floor relative to the voltage at 1300.5 MHz",
    "gpu_v_knee_mhz": "GPU clock above which the voltage rises linearly to 1",
    "cpu_v_min": "CPU voltage floor relative to the voltage at 2201.6 MHz",
    "cpu_v_knee_mhz": "CPU clock above which the voltage rises linearly to 1",
    # --- GPU and memory dynamic energy
    "e_flop_tc_pj": "energy per TF32 tensor-core FLOP at top voltage (pJ), scales with V^2",
    "e_flop_cuda_pj": "energy per FP32 CUDA-core FLOP at top voltage (pJ), scales with V^2",
    "e_flop_dw_pj": "energy per depthwise-conv FLOP at top voltage (pJ)",
    "e_flop_elt_pj": "energy per element-wise FLOP at top voltage (pJ)",
    "p_gpu_active_w": "GPU power while a kernel runs, switching part at 1300.5 MHz (W), ~ f V^2",
    "p_gpu_on_w": "GPU power while a workload runs, beyond idle (un-gated, leakage), at top voltage (W), ~ V",
    "gpu_stall_frac": "fraction of the GPU's busy power drawn while its kernels stall on memory",
    "e_byte_pj": "DRAM energy per byte moved (pJ/B)",
    "p_mem_active_w": "memory-system power while busy at 3199 MHz, EMC-clock dependent part (W)",
    "p_mem_active_floor_w": "memory-system power while busy, clock-independent part (W)",
    "p_mem_active_exp": "exponent of the busy memory power in the EMC clock",
    # --- static (idle) power of a mode
    "p_base_w": "always-on power: SoC, regulators, DRAM self-refresh, carrier (W)",
    "p_core_leak_w": "idle power per online CPU core, leakage part at top voltage (W), ~ V",
    "p_core_clock_w": "idle power per online CPU core, clock part at 2201.6 MHz (W), ~ f V^2",
    "p_gpu_idle_leak_w": "idle GPU power, leakage part at top voltage (W), ~ V",
    "p_gpu_idle_clock_w": "idle GPU power, clock part at 1300.5 MHz (W), ~ f V^2",
    "p_emc_idle_w": "idle memory-controller / DRAM power at 3199 MHz (W)",
    "p_emc_idle_exp": "exponent of the idle memory power in the EMC clock",
    "p_cap_w": "highest board power the twin reports (W); the Orin AGX peaks near 67 W",
    # --- CPU side
    "p_core_busy_w": "dynamic power of one busy CPU core at 2201.6 MHz (W), ~ f V^2",
    "spin_util": "utilisation of the Python thread while it waits on the GPU (spin / yield)",
    "t_op_us": "CPU time to dispatch one PyTorch op (one kernel launch) at 2201.6 MHz (us)",
    "t_module_us": "CPU time of one nn.Module call (hooks, Python) at 2201.6 MHz (us)",
    "t_internal_us": "CPU time of a kernel launched from C++ inside a fused call (cuDNN RNN) (us)",
    "t_sync_us": "synchronise + event record at the end of a minibatch at 2201.6 MHz (us)",
    "cpu_freq_exp": "CPU time ~ (2201.6 / f_cpu) ** cpu_freq_exp",
    "cpu_mem_sens": "extra CPU time at 665.6 MHz EMC relative to 3199 MHz (memory latency)",
    # --- GPU kernels
    "k_overhead_us": "fixed GPU time per kernel at 1300.5 MHz (us), ~ 1/f_gpu",
    "eff_tc": "achieved fraction of the TF32 peak by large convolutions",
    "eff_cuda": "achieved fraction of the CUDA-core FP32 peak by large matmuls",
    "eff_dw": "achieved fraction of the CUDA-core peak by depthwise convolutions",
    "eff_elt": "achieved fraction of the CUDA-core peak by element-wise FLOP",
    "eff_mem": "achieved fraction of the benchmark bandwidth by large kernels",
    "half_mflop": "a matmul's fill and drain (its first and last wave), in FLOP of its unit: paid once per kernel, "
                  "at most 16 (SMs) x the kernel's own FLOP (MFLOP)",
    "half_mbyte": "a kernel's memory fill and drain, in bytes at its bandwidth: paid once per kernel (MB)",
    "half_reduction": "reduction depth (K of a matmul, C_in/groups x k x k of a convolution, the head dimension of "
                      "fused attention) at which a kernel's tensor/CUDA-core efficiency halves",
    # --- data loading
    "loader_workers": "DataLoader worker processes (Fulcrum and Pagoda: 4)",
    "t_decode_train_ms_per_mpix": "CPU time to load + decode + augment one megapixel image for training (ms)",
    "t_decode_infer_ms_per_mpix": "CPU time to load + decode + resize one megapixel image for inference (ms)",
    "t_token_sample_us": "CPU time to collate one text sample (us)",
    "t_fetch_ms_per_mb": "main-thread time to fetch a batch from the loader workers, per MB of input (ms)",
}

DEFAULT_PARAMS: dict[str, float] = {
    "peak_core_tflops_per_ghz": 14.2, "peak_mem_tflops": 24.0, "peak_mem_exp": 1.6, "peak_softmin_k": 2.0,
    "bw_gpu_gbs_per_ghz": 180.0, "bw_dram_eff": 0.85, "bw_mem_exp": 1.05, "bw_softmin_k": 3.0,
    "dram_bus_bits": 256.0,
    "fp16_peak_ratio": 33.0 / 14.7, "fp16_bw_ratio": 159.7 / 164.4, "cuda_fp32_ratio": 3.49 / 14.7,
    "gpu_v_min": 0.62, "gpu_v_knee_mhz": 600.0, "cpu_v_min": 0.60, "cpu_v_knee_mhz": 1000.0,
    "e_flop_tc_pj": 3.0, "e_flop_cuda_pj": 20.0, "e_flop_dw_pj": 20.0, "e_flop_elt_pj": 20.0,
    "p_gpu_active_w": 9.0, "p_gpu_on_w": 1.5, "gpu_stall_frac": 0.3,
    "e_byte_pj": 40.0, "p_mem_active_w": 4.0, "p_mem_active_floor_w": 2.0, "p_mem_active_exp": 1.5,
    "p_base_w": 6.0, "p_core_leak_w": 0.12, "p_core_clock_w": 0.25, "p_gpu_idle_leak_w": 1.0,
    "p_gpu_idle_clock_w": 2.0, "p_emc_idle_w": 3.5, "p_emc_idle_exp": 0.8, "p_cap_w": 66.5,
    "p_core_busy_w": 1.6, "spin_util": 0.6,
    "t_op_us": 70.0, "t_module_us": 12.0, "t_internal_us": 6.0, "t_sync_us": 60.0,
    "cpu_freq_exp": 1.0, "cpu_mem_sens": 0.25,
    "k_overhead_us": 4.0, "eff_tc": 0.45, "eff_cuda": 0.45, "eff_dw": 0.05, "eff_elt": 0.3, "eff_mem": 0.8,
    "half_mflop": 40.0, "half_mbyte": 1.0, "half_reduction": 0.0,
    "loader_workers": 4.0, "t_decode_train_ms_per_mpix": 80.0, "t_decode_infer_ms_per_mpix": 50.0,
    "t_token_sample_us": 20.0, "t_fetch_ms_per_mb": 0.5,
}

POSITIVE_PARAMS = frozenset({
    "peak_core_tflops_per_ghz", "peak_mem_tflops", "peak_mem_exp", "peak_softmin_k", "bw_gpu_gbs_per_ghz",
    "bw_dram_eff", "bw_mem_exp", "bw_softmin_k", "dram_bus_bits", "fp16_peak_ratio", "fp16_bw_ratio",
    "cuda_fp32_ratio", "gpu_v_min", "gpu_v_knee_mhz", "cpu_v_min", "cpu_v_knee_mhz", "p_base_w", "p_cap_w",
    "eff_tc", "eff_cuda", "eff_dw", "eff_elt", "eff_mem", "loader_workers", "t_op_us", "t_sync_us",
    "k_overhead_us"})
"""Coefficients the physics divides by or raises to (peaks, bandwidths, efficiencies, exponents, voltage floors):
zero or less makes every prediction NaN or infinite. Every other coefficient is a cost that may be 0, never < 0."""

FRACTION_PARAMS = frozenset({"bw_dram_eff", "gpu_v_min", "cpu_v_min", "eff_tc", "eff_cuda", "eff_dw", "eff_elt",
                             "eff_mem", "gpu_stall_frac", "spin_util"})
"""Coefficients that are fractions: at most 1."""

_PARAM_MAX = 1e6  # no coefficient of the physics comes near this in its unit (W, pJ, us, MHz, TFLOP/s)


def param_problem(name: str, value: object) -> str | None:
    """Why ``value`` cannot be coefficient ``name`` of the physics (``None``: it can): a finite number, >= 0 (> 0 for
    :data:`POSITIVE_PARAMS`), at most 1 for :data:`FRACTION_PARAMS`, below 1e6."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, got {type(value).__name__}"
    v = float(value)
    if v != v or v in (float("inf"), float("-inf")):
        return f"{value!r} is not a finite number"
    if name in POSITIVE_PARAMS and v <= 0:
        return f"{v:g} is not > 0 (the physics divides by it or raises to it: every prediction would be NaN)"
    if v < 0:
        return f"{v:g} is negative (a time, an energy, a power or a count: >= 0)"
    if name in FRACTION_PARAMS and v > 1:
        return f"{v:g} is a fraction above 1"
    if v > _PARAM_MAX:
        return f"{v:.3g} is implausibly large (at most {_PARAM_MAX:g} in its unit)"
    return None


def _softmin(a, b, k):
    """Smooth minimum (sum of inverse k-th powers): -> min(a, b) as k -> inf, harmonic mean-like at k = 1."""
    return (a ** -k + b ** -k) ** (-1.0 / k)


class Physics:
    """Coefficients -> functions of the knobs. ``Physics(params)``; every method is vectorised."""

    def __init__(self, params: Mapping[str, float] | None = None) -> None:
        p = dict(DEFAULT_PARAMS)
        if params:
            unknown = set(params) - set(DEFAULT_PARAMS)
            if unknown:
                raise ValueError(f"unknown twin parameter(s) {sorted(unknown)}; known: {sorted(DEFAULT_PARAMS)}")
            p.update({k: float(v) for k, v in params.items()})
        self.p = p

    # ------------------------------------------------------------------ voltage
    def v_gpu(self, f_gpu):
        p = self.p
        f = np.asarray(f_gpu, dtype=float)
        rise = (f - p["gpu_v_knee_mhz"]) / (F_GPU_MAX - p["gpu_v_knee_mhz"])
        return p["gpu_v_min"] + (1.0 - p["gpu_v_min"]) * np.clip(rise, 0.0, None)

    def v_cpu(self, f_cpu):
        p = self.p
        f = np.asarray(f_cpu, dtype=float)
        rise = (f - p["cpu_v_knee_mhz"]) / (F_CPU_MAX - p["cpu_v_knee_mhz"])
        return p["cpu_v_min"] + (1.0 - p["cpu_v_min"]) * np.clip(rise, 0.0, None)

    # ------------------------------------------------------------------ time roofline
    def peak_flops(self, f_gpu, f_mem, precision: str = "fp32"):
        """Benchmark peak FLOP/s: TF32 tensor cores for ``fp32`` (Pagoda's roofline), ``fp16``, or
        ``fp32_cuda`` (CUDA cores, tensor cores off)."""
        p = self.p
        core = p["peak_core_tflops_per_ghz"] * np.asarray(f_gpu, dtype=float) / 1e3
        feed = p["peak_mem_tflops"] * (np.asarray(f_mem, dtype=float) / F_MEM_MAX) ** p["peak_mem_exp"]
        tf32 = _softmin(core, feed, p["peak_softmin_k"]) * 1e12
        if precision == "fp32":
            return tf32
        if precision == "fp16":
            return tf32 * p["fp16_peak_ratio"]
        if precision in ("fp32_cuda", "cuda"):
            return tf32 * p["cuda_fp32_ratio"]
        raise ValueError(f"unknown precision {precision!r}: expected fp32, fp16 or fp32_cuda")

    def bandwidth(self, f_gpu, f_mem, precision: str = "fp32"):
        """Benchmark DRAM bandwidth, B/s: the soft minimum of what the GPU can issue and what DRAM delivers."""
        p = self.p
        gpu = p["bw_gpu_gbs_per_ghz"] * np.asarray(f_gpu, dtype=float) / 1e3
        dram = self.dram_bandwidth(f_mem) / 1e9
        bw = _softmin(gpu, dram, p["bw_softmin_k"]) * 1e9
        if precision == "fp16":
            return bw * p["fp16_bw_ratio"]
        if precision in ("fp32", "fp32_cuda", "cuda"):
            return bw
        raise ValueError(f"unknown precision {precision!r}: expected fp32, fp16 or fp32_cuda")

    # ------------------------------------------------------------------ energy
    def p_gpu_active(self, f_gpu):
        """GPU power while kernels compute (beyond static), W: switching power ~ f V^2."""
        v = self.v_gpu(f_gpu)
        return self.p["p_gpu_active_w"] * np.asarray(f_gpu, dtype=float) / F_GPU_MAX * v * v

    def p_gpu_on(self, f_gpu):
        """GPU power whenever a workload runs (not power-gated between kernels), W: leakage ~ V."""
        return self.p["p_gpu_on_w"] * self.v_gpu(f_gpu)

    def e_flop(self, unit: str, f_gpu):
        """Marginal energy per FLOP of an execution unit (``tc``, ``cuda``, ``dw``, ``elt``), J/FLOP."""
        v = self.v_gpu(f_gpu)
        return self.p[f"e_flop_{unit}_pj"] * 1e-12 * v * v

    def p_mem_active(self, f_mem):
        p = self.p
        return p["p_mem_active_floor_w"] + p["p_mem_active_w"] * (np.asarray(f_mem, dtype=float) / F_MEM_MAX) ** p[
            "p_mem_active_exp"]

    def dram_bandwidth(self, f_mem):
        """What DRAM can deliver at this EMC clock (the memory side of the bandwidth), B/s."""
        p = self.p
        peak = DRAM_PEAK_BPS * p["dram_bus_bits"] / 256.0
        return p["bw_dram_eff"] * peak * (np.asarray(f_mem, dtype=float) / F_MEM_MAX) ** p["bw_mem_exp"]

    def e_byte(self, f_gpu, f_mem):
        """Marginal energy per DRAM byte, J/B: DRAM access energy plus the busy memory system's power
        spread over the bytes DRAM can move per second (the GPU clock does not enter: when the GPU
        limits the bandwidth, the memory system is not the one kept busy)."""
        f_gpu = np.asarray(f_gpu, dtype=float)
        return self.p["e_byte_pj"] * 1e-12 + self.p_mem_active(f_mem) / self.dram_bandwidth(f_mem) + 0.0 * f_gpu

    def active_frac(self, f_gpu, f_mem):
        """Share of a compute-bound kernel's time the SMs really compute: peak / compute-side limit (<= 1);
        the rest they wait for the memory system to feed them (lower EMC clocks: more waiting)."""
        p = self.p
        core = p["peak_core_tflops_per_ghz"] * np.asarray(f_gpu, dtype=float) / 1e3 * 1e12
        return np.minimum(self.peak_flops(f_gpu, f_mem) / core, 1.0)

    def eps_flop(self, f_gpu, f_mem, precision: str = "fp32"):
        """Energy per FLOP a Pagoda-style benchmark attributes (J/FLOP): tensor-core FLOP energy plus the
        GPU's busy power (computing, or stalled while the memory system feeds it) and on power spread over
        the peak FLOP/s."""
        e = self.e_flop("tc", f_gpu)
        if precision == "fp16":
            e = e * 0.5
        a = self.active_frac(f_gpu, f_mem)
        busy = self.p_gpu_active(f_gpu) * (a + self.p["gpu_stall_frac"] * (1.0 - a))
        return e + (busy + self.p_gpu_on(f_gpu)) / self.peak_flops(f_gpu, f_mem, precision)

    def eps_mop(self, f_gpu, f_mem, precision: str = "fp32"):
        """Energy per byte a Pagoda-style benchmark attributes (J/B): DRAM energy plus the busy memory
        system, the stalled GPU and the GPU's on power spread over the bandwidth."""
        gpu = self.p["gpu_stall_frac"] * self.p_gpu_active(f_gpu) + self.p_gpu_on(f_gpu)
        return self.e_byte(f_gpu, f_mem) + gpu / self.bandwidth(f_gpu, f_mem, precision)

    def _idle_terms(self, f_cpu, f_gpu, f_mem):
        """Idle power of one online core, of the clocked GPU and of the memory controller, W."""
        p = self.p
        vc = self.v_cpu(f_cpu)
        vg = self.v_gpu(f_gpu)
        core = p["p_core_leak_w"] * vc + p["p_core_clock_w"] * np.asarray(f_cpu, dtype=float) / F_CPU_MAX * vc * vc
        gpu = p["p_gpu_idle_leak_w"] * vg + p["p_gpu_idle_clock_w"] * np.asarray(f_gpu, dtype=float) / F_GPU_MAX * vg * vg
        emc = p["p_emc_idle_w"] * (np.asarray(f_mem, dtype=float) / F_MEM_MAX) ** p["p_emc_idle_exp"]
        return core, gpu, emc

    def static_power(self, cores, f_cpu, f_gpu, f_mem):
        """Idle power of a mode (pi_0), W: base + online cores + clocked GPU + memory controller."""
        core, gpu, emc = self._idle_terms(f_cpu, f_gpu, f_mem)
        return self.p["p_base_w"] + np.asarray(cores, dtype=float) * core + gpu + emc

    def static_parts(self, cores, f_cpu, f_gpu, f_mem) -> dict[str, np.ndarray]:
        """pi_0 split into ``base``, ``cpu`` (online cores), ``gpu`` (clocked GPU) and ``emc`` (memory), W."""
        core, gpu, emc = self._idle_terms(f_cpu, f_gpu, f_mem)
        return {"base": np.full(np.shape(gpu), self.p["p_base_w"]), "cpu": np.asarray(cores, dtype=float) * core,
                "gpu": gpu, "emc": emc}

    def p_core_busy(self, f_cpu):
        """Dynamic power of one busy CPU core, W."""
        vc = self.v_cpu(f_cpu)
        return self.p["p_core_busy_w"] * np.asarray(f_cpu, dtype=float) / F_CPU_MAX * vc * vc

    # ------------------------------------------------------------------ CPU side
    def cpu_factor(self, f_cpu, f_mem):
        """CPU time relative to MAXN: ~1/f_cpu, plus memory latency at low EMC clocks."""
        p = self.p
        f = np.asarray(f_cpu, dtype=float)
        m = np.asarray(f_mem, dtype=float)
        lat = 1.0 + p["cpu_mem_sens"] * (F_MEM_MAX / m - 1.0) / (F_MEM_MAX / 665.6 - 1.0)
        return (F_CPU_MAX / f) ** p["cpu_freq_exp"] * lat

    def k_overhead(self, f_gpu):
        """Fixed GPU time per kernel, s."""
        return self.p["k_overhead_us"] * 1e-6 * F_GPU_MAX / np.asarray(f_gpu, dtype=float)
