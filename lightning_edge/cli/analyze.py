"""``lightning-edge analyze``: per-layer FLOP, bytes and arithmetic intensity of a model."""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning_edge.cli import add_json_argument, write_json

HELP = "per-layer FLOP, MAC, bytes and arithmetic intensity of a model, from shapes (nothing is run)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="zoo:NAME (e.g. zoo:resnet50; see --list) or module.path:factory for your own "
                                 "model (the factory returns a model, or a (model, example_inputs) pair)")
    p.add_argument("--batch-size", "-b", type=int, default=None,
                   help="batch size of the example inputs (default 1, or what your factory returns; with a factory "
                        "that returns inputs: passed as its batch_size argument, else their batch dimension resized)")
    p.add_argument("--seq-len", type=int, default=None, help="sequence length for text models (zoo default)")
    p.add_argument("--input-shape", action="append", default=None, metavar="C,H,W",
                   help="shape of one input without the batch dimension, for a user model whose factory "
                        "returns only the model (repeat for several inputs)")
    p.add_argument("--input-dtype", default=None, help="dtype of --input-shape inputs (float32, long ...; "
                                                       "default float32)")
    p.add_argument("--training", action="store_true", help="also count the backward pass")
    p.add_argument("--fold-bn", action="store_true", help="fold BatchNorm into the preceding conv (inference engines)")
    p.add_argument("--dtype", default=None, help="cast the model to fp16 / bf16 / fp32 before counting")
    p.add_argument("--sort", choices=["flops", "bytes", "macs", "params"], default=None,
                   help="order the table by this column (default: execution order)")
    p.add_argument("--top", type=int, default=None, help="show only the first N rows of the table")
    add_json_argument(p, "the full result")
    p.add_argument("--list", action="store_true", help="list the zoo models and exit")


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def factory_from_spec(spec: str) -> Callable:
    """The factory a ``module.path:factory`` spec names (every command that takes a user's model resolves it here).
    One-line ``ValueError`` for a malformed spec (saying the forms expected), a module that cannot be imported
    (saying whether it is missing or what importing it raised: SystemExit, SyntaxError, an import inside it ...),
    a missing or non-callable attribute."""
    mod_name, _, fn_name = spec.rpartition(":")
    is_path = mod_name.endswith(".py") or "/" in mod_name or os.sep in mod_name
    if is_path or not all(_NAME.fullmatch(x) for x in (*mod_name.split("."), fn_name)):
        stem = Path(mod_name).stem
        hint = (f"; {mod_name!r} is a file path: run from the folder that holds {stem}.py and give "
                f"{stem}:{fn_name or 'FACTORY'}" if is_path and _NAME.fullmatch(stem) else "")
        raise ValueError(f"model {spec!r} not understood: expected zoo:NAME (e.g. zoo:resnet50) or "
                         f"module.path:factory (e.g. mypkg.models:build){hint}")
    here = os.getcwd()  # the folder the command runs in, by its absolute path: a "." entry's cached listing can
    if here not in sys.path:  # be another folder's after a chdir (Python 3.8 / 3.10 FileFinder)
        sys.path.insert(0, here)
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name and (mod_name == exc.name or mod_name.startswith(exc.name + ".")):
            raise ValueError(f"cannot import {mod_name!r} ({exc}); run from the folder that holds it or install "
                             "it") from exc
        raise ValueError(f"importing {mod_name!r} for {spec} failed: {_raised(exc)} (a module it imports is "
                         "missing: install it)") from exc
    except (Exception, SystemExit) as exc:  # whatever the module runs when imported
        raise ValueError(f"importing {mod_name!r} for {spec} raised {_raised(exc)}") from exc
    factory = getattr(module, fn_name, None)
    if factory is None:
        raise ValueError(f"module {mod_name!r} has no attribute {fn_name!r}")
    if not callable(factory):
        raise ValueError(f"{spec} is not callable (it is of type {type(factory).__name__}): the factory must be a "
                         "function that returns a model, or a (model, example_inputs) pair")
    return factory


def call_factory(spec: str, factory: Callable, *args: Any, **kwargs: Any) -> Any:
    """``factory(*args, **kwargs)``; whatever it raises (SystemExit, an ImportError inside it, a TypeError for a
    missing argument ...) is one line naming the factory, the exception and where it was raised."""
    try:
        return factory(*args, **kwargs)
    except (Exception, SystemExit) as exc:
        mod, _, fn = spec.rpartition(":")
        raise ValueError(f"the model factory {spec} raised {_raised(exc)}; for the traceback run: "
                         f"python -c 'import {mod}; {mod}.{fn}()'") from exc


def _raised(exc: BaseException) -> str:
    """``Type: first line of the message (at file.py:LINE)``: the innermost frame outside this package and the
    standard library (the user's code)."""
    if isinstance(exc, SystemExit):
        text = f"SystemExit (exit code {exc.code})"
    else:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    skip = ("<", str(Path(__file__).parents[1]), os.path.dirname(os.__file__))  # this package, importlib ...
    for fr in reversed(traceback.extract_tb(exc.__traceback__)):
        if not fr.filename.startswith(skip):
            return f"{text} (at {Path(fr.filename).name}:{fr.lineno})"
    return text


def load_model(spec: str, batch_size: int | None, seq_len: int | None, input_shapes=None, input_dtype=None):
    """Resolve ``zoo:NAME`` or ``module.path:factory`` to ``(model, args, kwargs)``: the model and the example call's
    positional and keyword inputs (the one loader of every command that takes a model). Every option that would be
    ignored is an error that says so.

    A factory may return a model (its inputs then come from ``--input-shape``), a ``(model, inputs)`` pair whose
    inputs are a tensor, a tuple of them or a dict of keyword inputs (the Hugging Face form ``model(**inputs)``), or
    an object with ``.model`` and ``.example_inputs`` (a tensor, a tuple, or a function of the batch size). The batch
    size: a factory that takes ``batch_size`` is called with it; otherwise ``batch_size`` (when given) resizes the
    leading dimension of the inputs it returns (integer inputs repeated), and the summary names the batch analysed.
    """
    import torch
    from torch import nn

    if seq_len is not None and seq_len < 1:
        raise ValueError(f"--seq-len must be >= 1 (tokens per sequence), got {seq_len}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    if spec.startswith("zoo:"):
        from lightning_edge import zoo

        for opt, val in (("--input-shape", input_shapes), ("--input-dtype", input_dtype)):
            if val:
                raise ValueError(f"{opt} applies to your own model (module.path:factory); a zoo model builds its "
                                 "own inputs: drop it and use --batch-size (and --seq-len for text models)")
        entry = zoo.get(spec[4:])
        kw = {"batch_size": batch_size or 1, "device": torch.device("meta")}
        if seq_len is not None:
            if entry.task != "text":
                raise ValueError(f"--seq-len applies to text models; {entry.name} takes images")
            kw["seq_len"] = seq_len
        return entry.build(device=torch.device("meta")), tuple(entry.inputs(**kw)), {}
    factory = factory_from_spec(spec)
    try:
        takes_bs = "batch_size" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        takes_bs = False
    made = call_factory(spec, factory, batch_size=batch_size) if takes_bs and batch_size is not None \
        else call_factory(spec, factory)

    def _check_module(model) -> None:
        if not isinstance(model, nn.Module):
            got = "None" if model is None else f"a {type(model).__name__}"
            raise ValueError(f"{spec} returned {got}, not a torch.nn.Module: the factory must return a model, a "
                             "(model, example_inputs) pair, or an object with .model and .example_inputs")

    inputs: Any = None
    if isinstance(made, tuple) and len(made) == 2:
        model, inputs = made
    else:
        model = getattr(made, "model", made) if not isinstance(made, nn.Module) else made
        for attr in ("example_inputs", "example_input", "example_input_array"):
            src = getattr(made, attr, None) if made is not model else None
            src = src if src is not None else getattr(model, attr, None)
            if src is None:
                continue
            inputs = src(batch_size or 1) if callable(src) and not isinstance(src, torch.Tensor) else src
            break
    _check_module(model)
    if inputs is not None:
        for opt, val in (("--input-shape", input_shapes), ("--input-dtype", input_dtype)):
            if val:
                raise ValueError(f"{opt} would be ignored: {spec} returns its own example inputs; drop the "
                                 "option, or return only the model from the factory")
        from lightning_edge.cost.capture import Call

        call = Call("", (), dict(inputs)) if isinstance(inputs, dict) else \
            Call("", tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,))
        if batch_size is not None and not takes_bs:
            if call.batch_size() is None:
                raise ValueError(f"--batch-size {batch_size}: the inputs {spec} returns have no batch dimension to "
                                 "resize; give the factory a batch_size argument, or drop --batch-size")
            call = call.resized(batch_size)
        return model, tuple(call.args), dict(call.kwargs)
    input_dtype = input_dtype or "float32"
    if not input_shapes:
        raise ValueError(f"{spec} returned only a model: give its input shape(s) without the batch dimension, "
                         "e.g. --input-shape 3,224,224, or return (model, example_inputs) from the factory")
    dt = getattr(torch, input_dtype, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"--input-dtype {input_dtype!r} is not a torch dtype (float32, float16, long ...)")
    out = []
    for s in input_shapes:
        try:
            dims = [int(x) for x in s.replace("x", ",").split(",") if x]
        except ValueError as exc:
            raise ValueError(f"--input-shape {s!r}: expected comma-separated integers such as 3,224,224") from exc
        out.append(torch.empty((batch_size or 1, *dims), dtype=dt, device="meta"))
    return model, tuple(out), {}


def batch_of(args: tuple, kwargs: dict) -> int | None:
    """The batch size of an example call (what the summary names)."""
    from lightning_edge.cost.capture import batch_size

    return batch_size((args, kwargs))


def run(args: argparse.Namespace) -> int:
    from lightning_edge.cost import analyze

    if args.list:
        from lightning_edge import zoo

        for name in zoo.names():
            e = zoo.get(name)
            print(f"zoo:{name:<20} {e.task:<10} {e.reference_params / 1e6:8.2f}M params  {e.description}")
        return 0
    model, inputs, kwargs = load_model(args.model, args.batch_size, args.seq_len, args.input_shape,
                                       args.input_dtype)
    try:
        cost = analyze(model, *inputs, training=args.training, fold_bn=args.fold_bn, dtype=args.dtype, **kwargs)
    except (ValueError, TypeError, IndexError) as exc:
        raise ValueError(_failed_on_inputs(args.model, (*inputs, *kwargs.values()), exc)) from exc
    except RuntimeError as exc:  # shape mismatches from inside the model
        raise RuntimeError(_failed_on_inputs(args.model, (*inputs, *kwargs.values()), exc)) from exc
    if args.json == "-":
        write_json(cost.to_json(), "-")
        return 0
    print(cost.table(top=args.top, sort=args.sort))
    t = cost.total
    print(f"\n{args.model} batch {batch_of(inputs, kwargs) or '?'}: {t.flops / 1e9:.3f} GFLOP, {t.macs / 1e9:.3f} GMAC, "
          f"{t.bytes / 1e6:.2f} MB moved, intensity {t.intensity:.2f} FLOP/B "
          "(estimated from shapes, nothing was run)")
    if args.json:
        write_json(cost.to_json(), args.json)
    return 0


def _failed_on_inputs(spec: str, inputs: tuple, exc: BaseException) -> str:
    shapes = ", ".join(str(tuple(getattr(x, "shape", ()))) for x in inputs)
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    # the wording varies by torch ("Expected ... scalar types: Long, Int", "indices must be long, int, byte or bool")
    ints = re.search(r"scalar types: Long|indices.*(Long|Int)|must be (Long|Int)|expected .*(Long|Int)", str(exc),
                     re.IGNORECASE)
    hint = (" --input-shape gives float inputs by default: a model that looks up token ids (an embedding) needs "
            "--input-dtype long" if ints else " check --input-shape, --input-dtype, --batch-size and --seq-len")
    return f"{spec} could not run on example inputs of shape {shapes} ({type(exc).__name__}: {first}):{hint}"
