"""Boards the calibration has never seen (issue 29 item 4): a catalogued module's board file with every coefficient
the fit may move drawn anew (seeded log-normal factors around the catalogue's extrapolation), written as a board
file and played by ``get_board("sim:PATH.json")``. Made up for testing and benchmarking the calibration, labelled
``simulated``: never a model of a real board."""

from __future__ import annotations

import math

import numpy as np

from lightning_edge.twin.board_files import BoardFile, board_file
from lightning_edge.twin.fit import HELD
from lightning_edge.twin.physics import F_GPU_MAX, F_MEM_MAX, Physics

#: coefficients that are fractions: a drawn value stays below 1
FRACTIONS = ("bw_dram_eff", "gpu_stall_frac", "spin_util", "eff_tc", "eff_cuda", "eff_dw", "eff_elt", "eff_mem",
             "gpu_v_min", "cpu_v_min")


def hidden_board(key: str, seed: int, spread: float = 0.2, base: BoardFile | None = None) -> BoardFile:
    """``base`` (default: the catalogue's board of ``key``) with each coefficient but the held ones (hardware facts,
    structure) times ``exp(spread x z)``, z standard normal (seeded, clipped at 2.5), fractions below 0.98."""
    bf = base if base is not None else board_file(key)
    rng = np.random.default_rng(seed)
    params = {}
    for k, v in bf.full_params.items():
        if k in HELD or v <= 0:
            params[k] = v
            continue
        f = math.exp(spread * float(np.clip(rng.standard_normal(), -2.5, 2.5)))
        params[k] = min(v * f, 0.98) if k in FRACTIONS else v * f
    return BoardFile(bf.key, params, {k: "simulated" for k in params}, label="simulated",
                     name=f"hidden {bf.key} #{seed} (made up: the catalogue's board, coefficients drawn anew)",
                     mode_space=bf.mode_space,
                     notes=[f"made up for testing the calibration: {bf.key}'s coefficients x exp({spread} N(0,1)), "
                            f"seed {seed}; not a model of a real board"])


#: what differs between two modules of the same silicon: their power figures (board, regulators, binning)
POWER_COEFFICIENTS = ("p_", "e_")

#: the GPU side of the roofline: its compute peak and its bandwidth (what a smaller or slower-binned GPU changes)
GPU_PEAK = ("peak_core_tflops_per_ghz", "peak_mem_tflops")
GPU_BANDWIDTH = ("bw_gpu_gbs_per_ghz", "bw_dram_eff")


def derated_board(key: str, seed: int, gpu: tuple[float, float] = (0.45, 0.85), power_spread: float = 0.25,
                  spread: float = 0.1) -> BoardFile:
    """A board the calibration has never seen that differs from the catalogue's ``key`` as a real board does
    (issue 38: "half the GPU's peak and bandwidth, other power figures"), drawn per ``seed``: its GPU's compute peak
    and its bandwidth each x U(``gpu``) (:data:`GPU_PEAK`, :data:`GPU_BANDWIDTH`), its power figures (``p_*``,
    ``e_*``; the rated cap aside) x ``exp(power_spread x z)``, every other coefficient the fit may move (efficiencies,
    CPU costs, curve shapes) x ``exp(spread x z)`` (z standard normal, clipped at 2.5; fractions below 0.98). Made up,
    labelled ``simulated``: never a model of a real board."""
    bf = board_file(key)
    rng = np.random.default_rng(1000 + seed)
    peak, bw = (float(rng.uniform(*gpu)) for _ in range(2))
    params = {}
    for k, v in sorted(bf.full_params.items()):
        if k in HELD or v <= 0:
            params[k] = v
            continue
        z = float(np.clip(rng.standard_normal(), -2.5, 2.5))
        if k in GPU_PEAK:
            f = peak
        elif k in GPU_BANDWIDTH:
            f = bw
        elif k.startswith(POWER_COEFFICIENTS):
            f = math.exp(power_spread * z)
        else:
            f = math.exp(spread * z)
        params[k] = min(v * f, 0.98) if k in FRACTIONS else v * f
    return BoardFile(bf.key, params, {k: "simulated" for k in params}, label="simulated",
                     name=f"derated {bf.key} #{seed} (made up: GPU peak x{peak:.2f}, bandwidth x{bw:.2f}, other "
                          "power figures)",
                     mode_space=bf.mode_space,
                     notes=[f"made up for testing the calibration: {bf.key}'s GPU peak x{peak:.2f} and bandwidth "
                            f"x{bw:.2f}, power figures x exp({power_spread} N(0,1)), the rest x exp({spread} N(0,1)), "
                            f"seed {seed}; not a model of a real board"])




def module_variant(bf: BoardFile, seed: int, spread: float = 0.1) -> BoardFile:
    """``bf`` with its power coefficients (``p_*``, ``e_*``; the rated cap aside) times ``exp(spread x z)``: another
    module of the same silicon (made up, labelled ``simulated``)."""
    rng = np.random.default_rng(seed)
    params = dict(bf.full_params)
    for k in sorted(params):
        if k.startswith(POWER_COEFFICIENTS) and k not in HELD and params[k] > 0:
            params[k] *= math.exp(spread * float(np.clip(rng.standard_normal(), -2.5, 2.5)))
    return BoardFile(bf.key, params, {k: "simulated" for k in params}, label="simulated",
                     name=f"hidden {bf.key} #{seed} (made up)", mode_space=bf.mode_space,
                     notes=[f"made up: {bf.key} extrapolated from a hidden silicon, power coefficients x "
                            f"exp({spread} N(0,1)), seed {seed}; not a model of a real board"])


#: how strongly the foreign board's layers' compute efficiency depends on the memory clock
FOREIGN_MEM_EXP = 0.4
#: the foreign board's GPU voltage levels above the knee (a staircase, where the twin's voltage rises linearly)
FOREIGN_V_STEPS = 3


class ForeignPhysics(Physics):
    """Physics the twin does not have (made up, for testing that calibration says so). Two things a real board
    could do: its GPU voltage comes in ``FOREIGN_V_STEPS`` discrete levels above the knee (a DVFS table's staircase,
    where the twin's voltage rises linearly with the clock), and its layers' compute efficiency falls with the memory
    clock at every GPU clock (``x (f_mem / 3199) ** FOREIGN_MEM_EXP``: tiles waiting on memory latency), while a
    large matmul benchmark still reaches the peak (``benchmark=True``: the microbenchmarks' physics)."""

    def __init__(self, params=None, benchmark: bool = False) -> None:
        super().__init__(params)
        self.benchmark = bool(benchmark)

    def v_gpu(self, f_gpu):
        p = self.p
        rise = np.clip((np.asarray(f_gpu, dtype=float) - p["gpu_v_knee_mhz"]) / (F_GPU_MAX - p["gpu_v_knee_mhz"]),
                       0.0, 1.0)
        return p["gpu_v_min"] + (1.0 - p["gpu_v_min"]) * np.ceil(rise * FOREIGN_V_STEPS) / FOREIGN_V_STEPS

    def peak_flops(self, f_gpu, f_mem, precision: str = "fp32"):
        peak = super().peak_flops(f_gpu, f_mem, precision)
        if self.benchmark:
            return peak
        return peak * (np.asarray(f_mem, dtype=float) / F_MEM_MAX) ** FOREIGN_MEM_EXP


def with_foreign_physics(board):
    """``board`` (a simulated board: ``get_board("sim:...")``) playing :class:`ForeignPhysics` with its own
    coefficients: its steps and power follow them, its microbenchmarks (``twin.roofline``) the benchmark's side of
    them (the twin's physics swapped in place)."""
    twin = board.twin
    params = twin.physics.p
    twin.physics = ForeignPhysics(params)
    bench = ForeignPhysics(params, benchmark=True)
    layers_roofline = type(twin).roofline

    def roofline(modes=None, precision="fp32"):
        twin.physics = bench
        try:
            return layers_roofline(twin, modes, precision)
        finally:
            twin.physics = ForeignPhysics(params)

    twin.roofline = roofline
    return board
