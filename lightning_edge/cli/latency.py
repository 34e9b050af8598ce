"""``lightning-edge latency``: fit a latency model on this machine, predict a network's latency, evaluate a model.

Examples::

    lightning-edge latency fit --kind stepwise --budget-s 600 --threads 1 --out cpu-latency.json --figures figs/
    lightning-edge latency fit --kind mixed --out mixed.json --layers-json lightning_logs/energy/version_0/layers.json \\
        --model zoo:resnet18 --batch-size 32                 # a profiling run's layers become training data
    lightning-edge latency predict cpu-latency.json zoo:resnet18 --batch-size 1 --image-size 64
    lightning-edge latency evaluate cpu-latency.json zoo:mobilenet_v2 --image-size 64   # measure and compare
"""

from __future__ import annotations

import argparse
import math

from lightning_edge.cli import add_json_argument, check_board_option, write_json

HELP = "latency models of Jantsch (roofline, refined, statistical, mixed, step-wise): fit, predict, evaluate"


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="zoo:NAME (e.g. zoo:resnet18) or module.path:factory returning a model or "
                                 "(model, example_inputs)")
    p.add_argument("--batch-size", "-b", type=int, default=1, help="batch size of the example inputs (default 1)")
    p.add_argument("--image-size", type=int, default=None, help="image side for zoo vision models (default: the zoo's)")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length for zoo text models")
    p.add_argument("--input-shape", action="append", default=None, metavar="C,H,W",
                   help="input shape without the batch dimension for a factory that returns only the model")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="latency_command", metavar="ACTION")
    sub.required = True
    f = sub.add_parser("fit", help="measure this machine and fit a latency model")
    f.add_argument("--kind", default="stepwise", choices=["roofline", "refined", "statistical", "mixed", "stepwise"])
    f.add_argument("--torch-device", default="cpu", metavar="cpu|cuda[:N]",
                   help="the torch device measured and modelled (default cpu)")
    f.add_argument("--device", default=None, metavar="BOARD",
                   help="not used by fit: --device names a board in lightning-edge; the torch device is --torch-device")
    f.add_argument("--budget-s", type=float, default=300.0,
                   help="seconds for the whole fit, measurements included (default 300)")
    f.add_argument("--seed", type=int, default=0, help="the statistical sweep's random draws (default 0)")
    f.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads for the measurements (recorded; on a busy machine 1 is steadiest)")
    f.add_argument("--clock", choices=["wall", "thread"], default=None,
                   help="CPU clock: 'thread' = the thread's CPU time (needs --threads 1; for a machine shared with "
                        "other work), default wall time")
    f.add_argument("--classes", nargs="+", default=None, help="step-wise layer classes to generate (default all)")
    f.add_argument("--layers-json", action="append", default=[], metavar="PATH",
                   help="EnergyProfiler layers.json whose per-layer forward times train the statistical/mixed "
                        "model (needs --model and the profiled --batch-size)")
    f.add_argument("--model", default=None, help="the model the --layers-json runs profiled (zoo:NAME or module:factory)")
    f.add_argument("--batch-size", "-b", type=int, default=1)
    f.add_argument("--image-size", type=int, default=None)
    f.add_argument("--seq-len", type=int, default=None)
    f.add_argument("--out", required=True, metavar="MODEL.json", help="write the fitted model here")
    f.add_argument("--figures", metavar="DIR", default=None, help="write a figure of each step-wise function here")
    f.set_defaults(_action=_fit)

    p = sub.add_parser("predict", help="estimate a network's forward latency per layer (nothing is run)")
    p.add_argument("latency_model", metavar="MODEL.json")
    _model_args(p)
    p.add_argument("--top", type=int, default=None, help="show only the N slowest layers")
    add_json_argument(p, "the prediction")
    p.set_defaults(_action=_predict)

    e = sub.add_parser("evaluate", help="measure a network on this machine and compare with the prediction")
    e.add_argument("latency_model", metavar="MODEL.json")
    _model_args(e)
    e.add_argument("--repeats", type=int, default=10, help="timed forward passes (the fastest counts; default 10)")
    add_json_argument(e, "the comparison (measured and estimated times, errors)")
    e.set_defaults(_action=_evaluate)


def load(spec: str, batch_size: int, image_size: int | None, seq_len: int | None, input_shapes=None,
         device: str = "meta"):
    """(model, inputs) on ``device`` (``meta``: nothing allocated); zoo vision models at ``image_size``."""
    import torch

    from lightning_edge.cli.analyze import load_model

    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    if spec.startswith("zoo:"):
        from lightning_edge import zoo

        entry = zoo.get(spec[4:])
        model = entry.build(device=torch.device(device))
        kw = {"batch_size": batch_size, "device": torch.device(device)}
        if seq_len is not None:
            kw["seq_len"] = seq_len
        inputs = tuple(entry.inputs(**kw))
        if image_size is not None:
            if entry.task == "text":
                raise ValueError(f"--image-size applies to image models; {entry.name} takes text")
            if image_size < 8:
                raise ValueError(f"--image-size must be at least 8, got {image_size}")
            inputs = tuple(torch.rand(t.shape[0], t.shape[1], image_size, image_size, device=device) for t in inputs)
        return model.eval(), inputs
    model, inputs, kwargs = load_model(spec, batch_size, seq_len, input_shapes)
    if kwargs:
        raise ValueError(f"{spec} returns keyword inputs ({', '.join(kwargs)}): the latency models time a model "
                         "called with positional inputs; return (model, (inputs, ...)) from the factory")
    if device != "meta":
        inputs = tuple(torch.rand(t.shape, device=device) if t.is_floating_point() else
                       torch.zeros(t.shape, dtype=t.dtype, device=device) for t in inputs)
    return model, inputs


def _fit(args) -> int:
    from lightning_edge.latency.model import LatencyModel

    samples = []
    if args.layers_json:
        if not args.model:
            raise ValueError("--layers-json needs --model (the model that was profiled) to know each layer's shapes")
        from lightning_edge.latency.measure import training_from_layers_json

        model, inputs = load(args.model, args.batch_size, args.image_size, args.seq_len)
        for path in args.layers_json:
            got = training_from_layers_json(path, model, *inputs)
            print(f"{path}: {len(got)} layers with forward times")
            samples += got
    if args.device is not None:
        check_board_option(args.device)
        raise ValueError(f"--device {args.device}: latency fit measures a torch device (--torch-device cpu|cuda[:N]), "
                         "not a board; to fit on a Jetson, run it there")
    lm = LatencyModel.fit(kind=args.kind, device=args.torch_device, budget_s=args.budget_s, threads=args.threads,
                          samples=samples, classes=args.classes, log=print, clock=args.clock, seed=args.seed)
    lm.save(args.out)
    print(lm.describe())
    print(f"wrote {args.out}")
    if args.figures and lm.stepwise:
        from lightning_edge.latency.plot import plot_model

        for p in plot_model(lm, args.figures):
            print(f"wrote {p}")
    return 0


def _predict(args) -> int:
    from lightning_edge.latency.model import LatencyModel

    lm = LatencyModel.load(args.latency_model)
    model, inputs = load(args.model, args.batch_size, args.image_size, args.seq_len, args.input_shape)
    pred = lm.predict(model, *inputs)
    if args.json != "-":
        print(pred.table(top=args.top))
    if args.json:
        write_json(pred.to_dict(), args.json)
    return 0


def _evaluate(args) -> int:
    import torch

    from lightning_edge.latency import measure
    from lightning_edge.latency.measure import (
        keep_freed_memory,
        network_page_faults,
        time_layers,
        time_network,
    )
    from lightning_edge.latency.model import LatencyModel

    lm = LatencyModel.load(args.latency_model)
    model, inputs = load(args.model, args.batch_size, args.image_size, args.seq_len, args.input_shape, device="cpu")
    if not str(lm.meta.get("device", "cpu")).startswith("cpu"):
        raise ValueError(f"{args.latency_model} was fitted on {lm.meta.get('device')}; evaluate measures on the CPU")
    prev, prev_clock = torch.get_num_threads(), measure.clock()
    try:
        torch.set_num_threads(int(lm.meta.get("threads") or prev))
        if lm.meta.get("clock") in ("wall", "thread"):
            measure.use_clock(lm.meta["clock"])  # measured as it was fitted
        clk = measure.clock()
        pred = lm.predict(model, *inputs)
        faults = network_page_faults(model, inputs)   # with the allocator as it is
        keep_freed_memory()                            # then as the model was fitted: no page faults
        measured = time_network(model, inputs, repeats=args.repeats)
        per_layer = time_layers(model, inputs, steps=max(3, args.repeats // 2))
    finally:
        torch.set_num_threads(prev)
        measure._CLOCK["name"] = prev_clock
    ape = abs(pred.total_s - measured) / measured * 100
    sq = [((la.time_s - per_layer[la.name]) / per_layer[la.name]) ** 2 for la in pred.layers
          if per_layer.get(la.name, 0) > 0]
    rmspe = math.sqrt(sum(sq) / len(sq)) * 100 if sq else float("nan")
    fault_s = lm.meta.get("page_fault_s")
    fault_ms = faults * fault_s * 1e3 if faults and fault_s else None
    if args.json:
        write_json({"model": args.model, "batch_size": args.batch_size, "kind": lm.kind,
                    "measured_s": measured, "repeats": args.repeats, "threads": lm.meta.get("threads"), "clock": clk,
                    "estimated_s": pred.total_s, "error_pct": ape, "layer_rmspe_pct": rmspe, "layers_compared": len(sq),
                    "page_faults_per_pass": faults, "page_faults_ms_estimated": fault_ms},
                   args.json)
    if args.json != "-":
        print(f"{args.model} batch {args.batch_size}: measured {measured * 1e3:.3f} ms (fastest of {args.repeats}, "
              f"{lm.meta.get('threads')} threads, {clk} clock), {lm.kind} estimate {pred.total_s * 1e3:.3f} ms: "
              f"error {ape:.1f} %; per-layer RMSPE {rmspe:.1f} % over {len(sq)} layers")
        if faults:
            cost = f" (about {fault_ms:.2f} ms, estimated)" if fault_ms is not None else ""
            print(f"note: with the allocator as it was, a pass page-faulted {faults} times{cost} more: freed "
                  "activation memory went back to the OS. Measured and predicted here: the allocator keeping its "
                  "memory. MALLOC_TRIM_THRESHOLD_ and MALLOC_MMAP_THRESHOLD_ set high (or jemalloc/tcmalloc) do that "
                  "for your runs (docs/latency.md)")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return args._action(args)
    except ImportError as exc:  # scikit-learn for a statistical/mixed fit: one line, as every error we raise
        raise RuntimeError(str(exc)) from None
