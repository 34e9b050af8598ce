"""Writing results never breaks the user's run (issue 36 item 8), on real file systems: a full tmpfs, a read-only one.

Was: ``EnergyProfiler.teardown`` raised ``OSError: No space left on device`` out of ``trainer.fit`` after training had
finished (the user's code after ``fit``, saving the model, never ran) and left ``layers.csv`` empty; a read-only
``log_dir`` stopped the fit at setup with a raw PermissionError; on an exception or Ctrl-C every layer measured so far
was dropped.
"""

from __future__ import annotations

import csv
import json
import signal
import warnings

import pytest

from tests.lightning.test_energy_profiler import _loader, _module, _pkg, _trainer


def _profiler(EnergyProfiler, log_dir):
    return EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, print_summary=False,
                          trace=True, figure=False, log_dir=str(log_dir))


def _fit(L, tmp_path, cb, **kw):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(L, tmp_path, [cb], **kw).fit(_module(L, kw.pop("fail_at", None)), _loader())
    return [str(c.message) for c in caught if c.category.__name__ == "ReportWriteWarning"]


def test_a_full_log_disk_is_one_warning_and_the_report_stays_in_memory(tmp_path, small_disk):
    L, _, EnergyProfiler = _pkg("lightning.pytorch")
    log_dir = small_disk.path / "logs"
    log_dir.mkdir()
    (log_dir / "layers.csv").write_text("stage,layer\nan earlier run,conv\n")  # an earlier run's file
    small_disk.fill()
    cb = _profiler(EnergyProfiler, log_dir)
    warned = _fit(L, tmp_path, cb)  # returns: the user's code after fit runs
    assert len(warned) == 1 and str(log_dir) in warned[0] and "No space left" in warned[0], warned
    assert cb.report is not None and cb.report.rows("train")  # every layer, in memory
    assert (log_dir / "layers.csv").read_text() == "stage,layer\nan earlier run,conv\n"  # never left empty
    out = tmp_path / "elsewhere.csv"
    cb.report.write_csv(out)  # saved where there is room
    assert len(list(csv.DictReader(out.open()))) == len(cb.report.rows())


def test_a_read_only_log_dir_never_stops_the_fit(tmp_path, small_disk):
    L, _, EnergyProfiler = _pkg("lightning.pytorch")
    small_disk.readonly()
    cb = _profiler(EnergyProfiler, small_disk.path / "logs")
    warned = _fit(L, tmp_path, cb)
    assert len(warned) == 1 and "Read-only file system" in warned[0] and str(small_disk.path) in warned[0], warned
    assert cb.report is not None and cb.report.rows("train")


def test_an_exception_mid_fit_writes_the_layers_measured_so_far_as_a_partial_run(tmp_path):
    L, _, EnergyProfiler = _pkg("lightning.pytorch")
    cb = _profiler(EnergyProfiler, tmp_path / "logs")
    with pytest.raises(RuntimeError, match="on purpose"):
        _trainer(L, tmp_path, [cb], max_steps=20).fit(_module(L, fail_at=5), _loader(n=160))
    rows = list(csv.DictReader((tmp_path / "logs" / "layers.csv").open()))
    assert rows and {r["stage"] for r in rows} == {"train"}
    doc = json.loads((tmp_path / "logs" / "layers.json").read_text())
    assert any("PARTIAL RUN" in n and "RuntimeError" in n for n in doc["notes"])


def test_ctrl_c_mid_fit_writes_the_layers_measured_so_far_as_a_partial_run(tmp_path):
    L, _, EnergyProfiler = _pkg("lightning.pytorch")
    cb = _profiler(EnergyProfiler, tmp_path / "logs")

    class CtrlC(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, i):
            if i == 5:
                raise KeyboardInterrupt  # what Ctrl-C raises in the training loop

    old = signal.getsignal(signal.SIGINT)
    try:
        try:  # newer Lightning ends the process after a KeyboardInterrupt (SystemExit), older returns from fit
            _trainer(L, tmp_path, [cb, CtrlC()], max_steps=20).fit(_module(L), _loader(n=160))
        except SystemExit:
            pass
    finally:
        signal.signal(signal.SIGINT, old)  # Lightning sets SIG_IGN for its shutdown
    doc = json.loads((tmp_path / "logs" / "layers.json").read_text())
    assert any("PARTIAL RUN" in n and "Ctrl-C" in n for n in doc["notes"])
    assert doc["stages"]["train"]["layers"]


# ---------------------------------------------------------------- issue 36, low: what the summaries say
def test_profiling_held_back_by_mode_changes_is_not_called_a_short_run(tmp_path):
    """Was: '0 of 40 batches profiled ... too short' when a tuner's mode changes, not the run's length, blocked it."""
    L, _, EnergyProfiler = _pkg("lightning.pytorch")
    from lightning_edge.devices import get_board

    board = get_board("sim:orin-agx", control="write")
    modes = ["8c/1344/727/2133", "12c/2201.6/1300.5/3199"]

    class Switcher(L.Callback):  # what a tuner profiling modes does: a new mode every few batches
        def on_train_batch_start(self, trainer, pl_module, batch, i):
            board.controller.apply(modes[i % 2])

    cb = EnergyProfiler(device=board, every_n_steps=1, warmup_steps=1, print_summary=False, trace=False,
                        figure=False, log_dir=str(tmp_path / "logs"))
    _trainer(L, tmp_path, [Switcher(), cb], max_steps=30).fit(_module(L), _loader(n=240))
    text = cb.summary_text
    assert "0 of 30 batches profiled per layer" in text
    assert "too short" not in text and "the power mode changed while they ran" in text, text
    board.controller.restore()
    board.close()


def test_the_tuner_summary_names_the_board_the_twin_plays(tmp_path):
    """Was: 'Jetson AGX Orin twin' for any board file."""
    from lightning_edge.devices import get_board
    from lightning_edge.lightning.tuner import _describe
    from lightning_edge.twin.board_files import board_file

    path = board_file("orin-nano-8gb").save(tmp_path / "nano.json")
    b = get_board(f"sim:{path}")
    text = _describe(b)
    assert "Orin Nano 8GB" in text and str(path) in text and "AGX" not in text and text.startswith("extrapolated")
    b.close()
    seed = get_board("sim:orin-agx")
    assert "AGX Orin" in _describe(seed) and _describe(seed).startswith("simulated")
    seed.close()
