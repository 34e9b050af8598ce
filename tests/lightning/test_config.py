"""One frozen configuration per callback (issue 37): an option is named, defaulted and checked once, and the callback,
the reporter and the session under it take the same object."""

from __future__ import annotations

import dataclasses

import pytest
from torch import nn

from lightning_edge.lightning.config import ProfilerConfig, TunerConfig, configure
from lightning_edge.lightning.reporter import EnergyReporter
from lightning_edge.tuning.online import WindowSpec


def test_the_profilers_options_are_one_frozen_object_shared_down_the_stack(tmp_path):
    cfg = ProfilerConfig(every_n_steps=5, log_dir=tmp_path, figure=False)
    assert cfg.log_dir == str(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.every_n_steps = 6
    rep = EnergyReporter(nn.Linear(3, 3), "none", cfg)
    assert rep.config is cfg and rep.session.config is cfg  # one object, not three copies of 23 arguments
    same = EnergyReporter(nn.Linear(3, 3), "none", every_n_steps=5, log_dir=tmp_path, figure=False)
    assert same.config == cfg
    assert cfg.with_options(top=8).top == 8 and cfg.top == 5


@pytest.mark.parametrize("bad, match", [
    (dict(every_n_steps=0), "every_n_steps must be 'auto' or an integer >= 1"),
    (dict(every_n_steps=True), "every_n_steps must be 'auto' or an integer >= 1"),
    (dict(warmup_steps=0), "warmup_steps must be >= 1"),
    (dict(analyze="sometimes"), "analyze must be True"),
    (dict(figure="maybe"), "figure must be True"),
    (dict(trace=1.5), "trace must be True"),
    (dict(log_layers="some"), "log_layers must be True"),
    (dict(host_cpu_s=-1.0), "host_cpu_s must be a time >= 0 s"),
])
def test_a_bad_option_is_a_clear_error(bad, match):
    with pytest.raises(ValueError, match=match):
        ProfilerConfig(**bad)


def test_an_unknown_option_names_the_known_ones():
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['every_n_step'\]; ProfilerConfig takes .*every_n_steps"):
        configure(None, ProfilerConfig, every_n_step=3)
    pytest.importorskip("lightning.pytorch")
    from lightning_edge.lightning.pytorch import EnergyProfiler, PowerModeTuner

    with pytest.raises(TypeError, match="unknown option"):
        EnergyProfiler(every_n_step=3)
    with pytest.raises(TypeError, match="TunerConfig takes"):
        PowerModeTuner(20, stratgy="gmd")
    cb = EnergyProfiler("sim:orin-agx", ProfilerConfig(top=3), overhead_target=0.1)
    assert cb.config.top == 3 and cb.config.overhead_target == 0.1 and cb.overhead_target == 0.1


def test_the_tuners_window_dict_becomes_a_window_spec_once():
    cfg = TunerConfig(window=dict(settle_s=0, min_steps=3, max_steps=5))
    assert cfg.window == WindowSpec(settle_s=0, min_steps=3, max_steps=5)
    with pytest.raises(ValueError, match="unknown setting"):
        TunerConfig(window=dict(settle=1))
    with pytest.raises(ValueError, match="switch_at"):
        TunerConfig(switch_at="never")
    with pytest.raises(ValueError, match="log_every_n_steps"):
        TunerConfig(log_every_n_steps=0)


def test_the_tuners_strategy_is_a_registered_name_checked_when_made():
    from lightning_edge.tuning import GMD
    from lightning_edge.tuning.search import STRATEGIES

    for name in STRATEGIES:
        assert TunerConfig(strategy=name.upper()).strategy == name  # any registered name, any case
    assert TunerConfig(strategy="BinarySearch").strategy == "binary-search"  # an alias, as its name
    gmd = GMD()
    assert TunerConfig(strategy=gmd).strategy is gmd
    with pytest.raises(ValueError, match=f"unknown tuning strategy 'gdm': expected one of {', '.join(STRATEGIES)}"):
        TunerConfig(strategy="gdm")
    with pytest.raises(TypeError, match="or a tuning Strategy, got float"):
        TunerConfig(strategy=1.5)
