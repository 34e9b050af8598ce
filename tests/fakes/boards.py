"""Boards the calibration has never seen (issue 29 item 4): a catalogued module's board file with every coefficient
the fit may move drawn anew (seeded log-normal factors around the catalogue's extrapolation), written as a board
file and played by ``get_board("sim:PATH.json")``. Made up for testing and benchmarking the calibration, labelled
``simulated``: never a model of a real board."""

from __future__ import annotations

import math

import numpy as np

from lightning_edge.twin.boards import BoardFile, board_file
from lightning_edge.twin.fit import HELD

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
