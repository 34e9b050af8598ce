"""Per-layer energy estimators behind one interface (``EnergyEstimator.estimate / estimate_many``).

* ``RooflineEnergy``: Pagoda eq. 2, E = eps_flop W + eps_mop Q + pi_0 T (Pagoda);
* ``RefinedRoofline``: the time model with utilisation efficiency (Jantsch), usable inside RooflineEnergy;
* ``ConvFCEnergyModel``: the empirical conv/FC model with published TX2 / Xavier NX parameters (Lahmer et al.);
* ``MACRegression``: MAC-count energy regression, fitted or SyNERGY's published TX1 model.

All results are labelled ``estimated``.
"""

from lightning_edge.energy.base import EnergyEstimator, LayerEnergies, LayerEnergy, resolve_roofline
from lightning_edge.energy.conv_fc import (
    BOARDS,
    TX2,
    XAVIER_NX,
    ConvFCEnergyModel,
    ConvFCParams,
    ConvShape,
    FCShape,
    fit_h_params,
    shapes_from_model,
)
from lightning_edge.energy.mac_regression import SYNERGY_TX1, MACRegression, RegressionReport
from lightning_edge.energy.refined import (
    ORIN_AGX_SMS,
    RefinedRoofline,
    gemm_utilization,
    utilization_efficiency,
)
from lightning_edge.energy.roofline_energy import RooflineEnergy

__all__ = [
    "EnergyEstimator", "LayerEnergy", "LayerEnergies", "resolve_roofline",
    "RooflineEnergy", "RefinedRoofline", "utilization_efficiency", "gemm_utilization", "ORIN_AGX_SMS",
    "ConvFCEnergyModel", "ConvFCParams", "ConvShape", "FCShape", "TX2", "XAVIER_NX", "BOARDS", "fit_h_params",
    "shapes_from_model", "MACRegression", "RegressionReport", "SYNERGY_TX1",
]
