"""SimWorkload: keys for persistent profile stores, and nn.Modules with example inputs."""

import pytest
import torch

from lightning_edge.devices import FULCRUM_MIDPOINT
from lightning_edge.twin.sim_workload import SimWorkload
from lightning_edge.zoo import resnet18


def test_zoo_name_fingerprint_and_device_model_are_stable():
    a, b = SimWorkload("resnet18", noise=False), SimWorkload("resnet18", noise=False, train_batch_size=32)
    assert a.fingerprint == "resnet18-train-bs16-fp32"
    assert b.fingerprint != a.fingerprint
    assert a.device_model == a.twin.store_key and a.device_model.startswith("sim:orin-agx+")  # never mixed with a
    # real board's profiles, nor with another model of the board


def test_module_with_example_inputs_matches_shapes_not_weights():
    m = resnet18(num_classes=10)
    w = SimWorkload(m, example_inputs=(torch.randn(8, 3, 64, 64),), noise=False)
    assert w.train_batch_size == 8
    assert "p11181642" in w.fingerprint and "in3-64-64" in w.fingerprint
    small, big = w.infer(FULCRUM_MIDPOINT, 1), w.infer(FULCRUM_MIDPOINT, 16)
    assert big.time_s > small.time_s and small.label == "simulated"
    # 64x64 inputs are ~12x cheaper than the zoo's 224x224: the twin saw the real shapes
    zoo = SimWorkload("resnet18", noise=False, train_batch_size=8).train(FULCRUM_MIDPOINT)
    assert w.train(FULCRUM_MIDPOINT).time_s < zoo.time_s


def test_module_without_inputs_is_a_clear_error():
    with pytest.raises(ValueError, match="example_inputs"):
        SimWorkload(torch.nn.Linear(3, 4))


def test_a_module_with_a_layers_attribute_is_a_module_not_a_cost():
    """A transformer keeps its blocks in ``self.layers``: it is still analysed as a module on its inputs."""

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(3)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    w = SimWorkload(Stack(), example_inputs=(torch.randn(4, 8),), noise=False)
    assert w.train_batch_size == 4 and "p216" in w.fingerprint
    assert w.train(FULCRUM_MIDPOINT).time_s > 0


def test_another_model_of_the_board_has_another_store_key():
    """Profiles simulated by one model of a board (coefficients, the workload model's version) are never read as
    another's: a calibrated or what-if board, or a newer release of the twin, starts its own studies."""
    from lightning_edge.twin import model as twin_model
    from lightning_edge.twin.model import OrinTwin

    a, b = OrinTwin(settling=False), OrinTwin(settling=False)
    assert a.store_key == b.store_key and a.store_key.startswith("sim:orin-agx+")
    name, value = next(iter(a.physics.p.items()))
    c = OrinTwin(settling=False, params={name: value * 1.1 + 1e-3})
    assert c.store_key != a.store_key
    key = a.store_key
    old = twin_model.MODEL_VERSION
    try:
        twin_model.MODEL_VERSION = old + "-next"
        assert a.store_key != key
    finally:
        twin_model.MODEL_VERSION = old
