"""Chrome/Perfetto traces of profiled steps: properly nested spans per thread, power counters, file layout."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import torch
from torch import nn

from lightning_edge.devices.sampler import Samples
from lightning_edge.profiling.attribution import PowerTrace, attribute_step
from lightning_edge.profiling.hooks import LayerTimer
from lightning_edge.profiling.trace import TRACE_SUFFIX, chrome_trace, nest_lanes, trace_path, write_trace


def test_nest_lanes_keeps_every_lane_properly_nested():
    spans = [(0, 100), (10, 50), (20, 30), (40, 60), (70, 90), (55, 65), (0, 100)]
    lanes = nest_lanes(spans)
    by_lane: dict[int, list] = {}
    for s, lane in zip(spans, lanes):
        by_lane.setdefault(lane, []).append(s)
    for group in by_lane.values():
        for a in group:
            for b in group:
                if a is b:
                    continue
                disjoint = a[1] <= b[0] or b[1] <= a[0]
                nested = (a[0] <= b[0] and b[1] <= a[1]) or (b[0] <= a[0] and a[1] <= b[1])
                assert disjoint or nested, (a, b)
    assert lanes[spans.index((40, 60))] != lanes[spans.index((10, 50))]  # overlaps without nesting


def _step():
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True), nn.Linear(8, 2))
    timer = LayerTimer(m, root_name="mlp")
    with timer.step("(forward)") as s:
        loss = m(torch.randn(4, 8)).sum()
        s.mark("(backward)", "bwd")
        loss.backward()
    return s.timing


def test_chrome_trace_spans_counters_and_file(tmp_path):
    t = _step()
    ts = np.arange(t.t0_ns - 2_000_000, t.t1_ns + 2_000_000, 500_000)
    rails = np.column_stack([np.full(ts.size, 10.0), np.full(ts.size, 5.0)])
    samples = Samples(ts, rails.sum(axis=1), rails, np.zeros(ts.size, bool), np.full(ts.size, np.nan), ("GPU", "CPU"))
    e = attribute_step(t.exclusive(), t.t0_ns, t.t1_ns, trace=PowerTrace(ts, samples.power_w), update_period_s=5e-4)
    doc = chrome_trace([(t, e, "train step 3")], power=lambda a, b: samples, pid=42,
                       metadata={"source": "measured"})
    evs = doc["traceEvents"]
    spans = [x for x in evs if x["ph"] == "X"]
    names = {(x["name"], x["args"].get("phase")) for x in spans}
    for layer in ("0", "1", "2", "mlp"):
        assert (layer, "fwd") in names and (layer, "bwd") in names
    step = next(x for x in spans if x["name"] == "ProfilerStep#0")
    assert step["args"]["label"] == "train step 3" and step["dur"] > 0
    assert abs(step["args"]["energy_j"] - e.energy_j) < 1e-12
    lin = next(x for x in spans if x["name"] == "0" and x["args"]["phase"] == "fwd")
    assert lin["args"]["method"] in ("measured", "apportioned") and lin["args"]["kind"] == "Linear"
    # spans of one thread nest properly
    by_tid: dict[int, list] = {}
    for x in spans:
        by_tid.setdefault(x["tid"], []).append((x["ts"], x["ts"] + x["dur"]))
    for group in by_tid.values():
        group.sort(key=lambda s: (s[0], -s[1]))
        stack: list[float] = []
        for a, b in group:
            while stack and stack[-1] <= a + 1e-3:  # µs; float rounding of adjacent spans
                stack.pop()
            assert not stack or b <= stack[-1] + 1e-3
            stack.append(b)
    counters = {x["name"] for x in evs if x["ph"] == "C"}
    assert counters == {"power total (W)", "power GPU (W)", "power CPU (W)"}
    assert all(x["pid"] == 42 for x in evs)
    threads = {x["args"]["name"] for x in evs if x["ph"] == "M" and x["name"] == "thread_name"}
    assert {"step", "forward", "backward"} <= threads

    path = write_trace(doc, trace_path(tmp_path / "logs"))
    rel = os.path.relpath(path, tmp_path / "logs")
    assert re.fullmatch(r"plugins/profile/energy/[^/]+_\d+\.\d+" + re.escape(TRACE_SUFFIX), rel), rel
    again = json.loads(path.read_text())
    assert again["traceEvents"] == json.loads(json.dumps(evs))


def test_trace_without_energy_or_power():
    t = _step()
    doc = chrome_trace([(t, None, "eval")])
    assert not [x for x in doc["traceEvents"] if x["ph"] == "C"]
    assert any(x["name"] == "2" for x in doc["traceEvents"] if x["ph"] == "X")
    json.dumps(doc, allow_nan=False)


def test_layer_spans_are_operators_with_flop_bytes_and_energy():
    """Issue 17: every span was ``user_annotation``, so torch-tb-profiler's overview was 100 % "Other" and its
    operator view empty; layers are now ``cpu_op`` spans carrying their FLOP, bytes and energy."""
    from lightning_edge.cost.types import Cost, LayerCost

    t = _step()
    e = attribute_step(t.exclusive(), t.t0_ns, t.t1_ns)
    cost = {"0": LayerCost("0", "Linear", forward=Cost(flops=1000, bytes_read=300, bytes_written=100))}
    spans = [x for x in chrome_trace([(t, e, "s")], costs=cost)["traceEvents"] if x["ph"] == "X"]
    lin = next(x for x in spans if x["name"] == "0" and x["args"]["phase"] == "fwd")
    assert lin["cat"] == "cpu_op"
    assert lin["args"]["flops"] == 1000 and lin["args"]["bytes"] == 400 and lin["args"]["energy_mj"] is not None
    assert next(x for x in spans if x["name"] == "ProfilerStep#0")["cat"] == "user_annotation"


def test_merge_into_a_torch_profiler_trace(tmp_path):
    """Layers and power go into the trace torch.profiler wrote, on its clock, as a process of their own."""
    import time

    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    from lightning_edge.devices.sampler import Samples
    from lightning_edge.profiling.hooks import LayerTimer
    from lightning_edge.profiling.trace import MERGED_PID, merge_into

    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    timer = LayerTimer(m)
    x = torch.randn(32, 8)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        timer.start_step()
        m(x).sum().backward()
        t = timer.stop_step()
    path = tmp_path / "host_1.123.pt.trace.json"
    prof.export_chrome_trace(str(path))
    e = attribute_step(t.exclusive(), t.t0_ns, t.t1_ns)
    ts = np.arange(t.t0_ns - 1_000_000, t.t1_ns + 1_000_000, 200_000)
    samples = Samples(ts, np.full(ts.size, 12.5), np.full((ts.size, 1), 12.5), np.zeros(ts.size, bool),
                      np.full(ts.size, np.nan), ("VDD_GPU_SOC",))
    before = json.loads(path.read_text())
    n = merge_into(path, [(t, e, "train step 0")], epoch_offset_ns=time.time_ns() - time.perf_counter_ns(),
                   power=lambda a, b: samples)
    assert n > 0
    doc = json.loads(path.read_text())
    assert len(doc["traceEvents"]) == len(before["traceEvents"]) + n
    ours = [x for x in doc["traceEvents"] if x.get("pid") == MERGED_PID]
    theirs = [x for x in before["traceEvents"] if x.get("ph") == "X" and x.get("cat") == "cpu_op"]
    assert {"power total (W)", "power VDD_GPU_SOC (W)"} <= {x["name"] for x in ours if x["ph"] == "C"}
    layer = next(x for x in ours if x["ph"] == "X" and x["name"] == "0" and x["args"]["phase"] == "fwd")
    # on their clock: our first layer's forward overlaps their aten::linear / addmm
    lin = [x for x in theirs if x["name"] in ("aten::linear", "aten::addmm")]
    assert lin and any(abs(x["ts"] - layer["ts"]) < 5_000 for x in lin), (layer["ts"], [x["ts"] for x in lin])
    assert merge_into(path, [(t, e, "again")], epoch_offset_ns=0) == 0  # merged once only


def test_a_merge_aligns_on_the_steps_annotations_not_on_the_clocks_offset(tmp_path):
    """The CI failure of stop 44: this machine's wall clock and perf_counter moved 0.1-0.25 ms apart from one
    reading to the next, as long as a small layer's span, so our spans missed the convolutions they contain. A step
    marked while torch.profiler records is placed by its annotation: even with an offset wrong by more than the
    step's length, the profiler's linear starts within our first layer's forward; without the annotation the same
    wrong offset misplaces it."""
    import time

    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    from lightning_edge.profiling.hooks import LayerTimer
    from lightning_edge.profiling.trace import MERGED_PID, STEP_MARK, mark_step, merge_into

    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    timer = LayerTimer(m)
    x = torch.randn(32, 8)
    mark_step("train step 0")  # not recording: nothing is left anywhere
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(3):  # warm: a profile's first calls and annotations take up to a millisecond (a session's
            m(x)  # steps are many, and the merge takes the median over them)
            mark_step(f"warm-up {i}")
        timer.start_step(step_label="train step 0")
        m(x).sum().backward()
        t = timer.stop_step()
        # the offset is wrong by the step's own length and 3 ms more: the step placed that late lies after its
        # end, in the pause (twice as long), where nothing ran. A fixed 3 ms can be shorter than a step the OS
        # preempts (a time slice: ~4 ms) while other tests run beside this one: the wrong offset would still put a
        # linear inside our span. (This test failed once beside other tests, its assertion not kept; this is one
        # way it could, and the failure was not reproduced since.)
        late_ns = (t.t1_ns - t.t0_ns) + 3_000_000
        time.sleep(2 * late_ns / 1e9 + 0.005)
        m(x)  # the trace goes on after the pause
    e = attribute_step(t.exclusive(), t.t0_ns, t.t1_ns)
    wrong = time.time_ns() - time.perf_counter_ns() + late_ns
    exported = tmp_path / "exported.json"
    prof.export_chrome_trace(str(exported))  # once: torch 2.13 refuses a second export
    for marked in (True, False):
        path = tmp_path / f"host_{int(marked)}.pt.trace.json"
        path.write_text(exported.read_text())
        doc = json.loads(path.read_text())
        annotations = [x for x in doc["traceEvents"] if str(x.get("name", "")).startswith(STEP_MARK)]
        assert [x["name"] for x in annotations][-1:] == [STEP_MARK + "train step 0"] and len(annotations) == 4
        if not marked:
            doc["traceEvents"] = [x for x in doc["traceEvents"] if x is not annotations[-1]]
            path.write_text(json.dumps(doc))
        assert merge_into(path, [(t, e, "train step 0")], epoch_offset_ns=wrong) > 0
        doc = json.loads(path.read_text())
        layer = next(x for x in doc["traceEvents"] if x.get("pid") == MERGED_PID and x["ph"] == "X"
                     and x["name"] == "0" and x["args"]["phase"] == "fwd")
        lin = [x for x in doc["traceEvents"] if x.get("cat") == "cpu_op" and x.get("pid") != MERGED_PID
               and x["name"] == "aten::linear"]
        inside = [x for x in lin if layer["ts"] <= x["ts"] <= layer["ts"] + layer["dur"]]  # it starts in our span
        assert bool(inside) == marked, (marked, layer["ts"], layer["dur"], [(x["ts"] - layer["ts"], x["dur"]) for x in lin][-3:])
        assert ("aligned on our steps' annotations" in json.dumps(doc)) == marked  # our metadata says how


def test_a_trace_is_written_whole_or_not_at_all_and_never_through_a_link(tmp_path, monkeypatch):
    """Issue 36's rule for every file the tool writes: a link at the trace's path is refused (its target untouched);
    a write the disk refuses (ENOSPC) leaves the earlier trace whole, not truncated, and no temporary file behind."""
    import errno

    import pytest

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "linked.pt.trace.json"
    link.symlink_to(victim)
    doc = chrome_trace([])
    with pytest.raises(OSError, match="symbolic link"):
        write_trace(doc, link)
    assert victim.read_text() == "precious" and link.is_symlink()

    path = write_trace(doc, tmp_path / "run.pt.trace.json")
    before = path.read_text()
    real_write = os.write

    def full_disk(fd, data):
        real_write(fd, bytes(data)[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_trace({"traceEvents": [{"ph": "M", "name": "x" * 1000}]}, path)
    monkeypatch.undo()
    assert path.read_text() == before and json.loads(before)["traceEvents"] == doc["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linked.pt.trace.json", "run.pt.trace.json", "victim.txt"]


def test_a_trace_with_odd_values_is_refused_in_one_line_or_its_odd_events_skipped(tmp_path):
    """Someone else's file: a start time that is not a number is one line naming the file; events whose time is
    not a number (text, null, 1e308) are not taken for the trace's window."""
    import pytest

    from lightning_edge.profiling.trace import merge_into

    path = tmp_path / "host_1.123.pt.trace.json"
    events = [{"ph": "X", "ts": t, "dur": 1, "pid": 1} for t in ("abc", None, 1e308, [1])]
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 10 ** 400}))
    with pytest.raises(ValueError, match="baseTimeNanoseconds: expected a number of nanoseconds") as exc:
        merge_into(path, [], epoch_offset_ns=0)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 5}))
    assert merge_into(path, [], epoch_offset_ns=0) == 0  # no span with a usable time: nothing to add
