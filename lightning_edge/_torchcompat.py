"""Every private or version-dependent torch API the package uses, each behind a version gate with a fallback.

The package supports torch 2.1 (JetPack 5) to the newest (README, "Supported stacks"). Code elsewhere imports
these names from here, never the private module itself; docs/architecture.md ("Private torch APIs") lists each
one, why it is needed and what the fallback does, and ``tests/test_torchcompat.py`` checks every gate on the
running torch (the CI matrix runs it on 2.1, 2.3, 2.5 and the newest).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils import _pytree as _pytree

__all__ = [
    "TORCH_VERSION", "tree_flatten", "tree_unflatten", "tree_map", "tree_leaves", "tree_children",
    "TorchDispatchMode", "OpOverload", "OpOverloadPacket", "current_autograd_node", "autograd_sequence_nr",
    "run_backward", "reparametrize", "force_eager", "is_compiling", "autocast_dtype", "has_aten_op",
    "conv_backend_name", "checkpoint_on_meta", "autocast_on_meta", "no_torch_function", "no_cyclic_gc",
    "SDPA_TAKES_GQA", "tensor_version", "optimizer_hooks_fire", "META_ARG_CHECKS",
]


def _version(text: str) -> tuple[int, int]:
    """``"2.3.0a0+40ec155e58.nv24.03"`` -> ``(2, 3)``: NVIDIA's pre-release wheels count as their release."""
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


#: (major, minor) of the running torch
TORCH_VERSION: tuple[int, int] = _version(torch.__version__)

# ------------------------------------------------------------------------------------------------ pytrees
# torch.utils._pytree: the only walker that knows every container torch and its users register (namedtuples,
# Hugging Face ModelOutput / BatchEncoding). tree_flatten / tree_unflatten / tree_map exist in every supported torch;
# tree_leaves from 2.2; tree_is_leaf and tree_flatten(is_leaf=) are newer.
tree_flatten = _pytree.tree_flatten
tree_unflatten = _pytree.tree_unflatten
tree_map = _pytree.tree_map


def tree_leaves(tree: Any) -> list:
    """Every leaf of ``tree`` (``torch.utils._pytree.tree_leaves`` from torch 2.2)."""
    return tree_flatten(tree)[0]


def tree_children(node: Any) -> tuple[list, Callable[[list], Any]] | None:
    """One level of a registered pytree container: ``(children, rebuild)`` with ``rebuild(new_children)`` making a
    container of the same kind, or None when ``node`` is a leaf (not a registered container)."""
    if hasattr(_pytree, "tree_is_leaf"):  # newer torch (2.13; not 2.5): is_leaf= supported too
        if _pytree.tree_is_leaf(node):
            return None
        children, spec = _pytree.tree_flatten(node, is_leaf=lambda y: y is not node)
        return children, lambda new: _pytree.tree_unflatten(new, spec)
    # older torch: the container's own flatten/unflatten functions from the registry (same in 2.1 to 2.5)
    kind = _pytree._get_node_type(node)
    entry = _pytree.SUPPORTED_NODES.get(kind)
    if entry is None:
        return None
    children, context = entry.flatten_fn(node)
    return list(children), lambda new: entry.unflatten_fn(list(new), context)


# ------------------------------------------------------------------------------------------------ dispatch
# TorchDispatchMode (torch.utils._python_dispatch) and OpOverload / OpOverloadPacket (torch._ops): the cost model
# sees every aten op through them; present and stable in every supported torch.
from torch._ops import OpOverload, OpOverloadPacket  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402


def no_torch_function() -> contextlib.AbstractContextManager:
    """A block in which no ``__torch_function__`` (mode or subclass) is called: ``torch._C.DisableTorchFunction``,
    in every supported torch. The cost model's dispatch mode runs the meta kernels in it, so that its function modes
    see the model's calls only (in torch 2.1 an op called inside ``__torch_dispatch__`` with a function mode active
    reached the mode with its arguments shifted: ``native_batch_norm_backward`` got a stride tuple as its input)."""
    return torch._C.DisableTorchFunction()


#: torch versions whose Python dispatch loses tensors to Python's cyclic garbage collector (see no_cyclic_gc)
_GC_UNSAFE_DISPATCH = TORCH_VERSION < (2, 3)


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """A block in which Python's cyclic garbage collector does not run, on torch before 2.3 only. There, a collection
    that happened to start while the autograd engine ran a backward under a ``TorchDispatchMode`` freed tensors the
    engine still held (seen on 2.1: ``native_batch_norm_backward`` received a freed object as its input, a
    ``Counter`` or a ``torch.Size`` in its place, or the process crashed), depending only on when the collector's
    allocation thresholds were crossed. Reference counting still frees everything; the collector resumes after the
    block, as it was. Elsewhere this block does nothing."""
    import gc

    if not _GC_UNSAFE_DISPATCH or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _sdpa_takes_gqa() -> bool:
    try:
        q = torch.empty(1, 2, 1, 4, device="meta")
        kv = torch.empty(1, 1, 1, 4, device="meta")
        torch.nn.functional.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except TypeError:  # "unexpected keyword argument 'enable_gqa'": torch before 2.5
        return False
    except RuntimeError:  # the meta kernel refusing the shapes: the keyword itself was taken
        return True
    return True


#: ``F.scaled_dot_product_attention`` takes ``enable_gqa`` (torch 2.5 and later): before, a grouped-query model
#: repeats its key/value heads itself (Hugging Face's ``repeat_kv``), and those copies are real work
SDPA_TAKES_GQA: bool = _sdpa_takes_gqa()


def has_aten_op(name: str) -> bool:
    """Whether the running torch defines ``aten::<name>``."""
    try:
        getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return False
    return True


# ------------------------------------------------------------------------------------------------ meta kernels
def _embedding_indices(weight: torch.Tensor, indices: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    if indices.dtype not in (torch.long, torch.int32):
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {indices.dtype} instead")


def _meta_embedding_checks_indices() -> bool:
    try:
        torch.ops.aten.embedding(torch.empty(2, 2, device="meta"), torch.empty(1, device="meta"))
    except RuntimeError:  # "Expected tensor for argument #1 'indices' to have one of the following scalar types"
        return True
    return False


#: the argument checks of the CPU and CUDA kernels that this torch's meta kernels skip, by op (``OpOverloadPacket``):
#: the cost model runs them before the meta kernel, so that a model given inputs it could not run fails as it would
#: on a device. torch 2.8's meta kernel of ``aten::embedding`` (Python, new in 2.8) took float indices, where 2.1 to
#: 2.5 (the C++ kernel's check) and 2.13 refuse them (probed: empty where the meta kernel refuses them itself)
META_ARG_CHECKS: dict[Any, Callable[..., None]] = (
    {} if _meta_embedding_checks_indices() else {torch.ops.aten.embedding: _embedding_indices})


# ------------------------------------------------------------------------------------------------ autograd
def current_autograd_node() -> Any:
    """The autograd node the engine is executing now (None outside a backward): ``torch._C._current_autograd_node``,
    present in every supported torch; the cost model charges a backward op to the module that made this node."""
    return torch._C._current_autograd_node()


def autograd_sequence_nr() -> int:
    """The autograd engine's next sequence number on this thread (``torch._C._autograd._get_sequence_nr``): a
    module call notes it as it starts, and owns the nodes numbered from there (cost/nodes.py)."""
    return torch._C._autograd._get_sequence_nr()


def run_backward(outputs: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]) -> None:
    """Run the autograd engine on ``outputs`` directly, not through ``torch.autograd.backward`` (which passes through
    the active TorchFunctionModes, switched off while they handle a call: a forward recomputed in the backward needs
    them on). ``torch.autograd.graph._engine_run_backward`` (2.3 and later) is a thin wrapper of the engine call
    used before it, ``Variable._execution_engine.run_backward``."""
    fn = getattr(torch.autograd.graph, "_engine_run_backward", None)
    if fn is not None:
        fn(tuple(outputs), tuple(grads), False, False, (), allow_unreachable=True, accumulate_grad=True)
        return
    torch.autograd.Variable._execution_engine.run_backward(  # type: ignore[attr-defined]
        tuple(outputs), tuple(grads), False, False, (), True, True)


@contextlib.contextmanager
def reparametrize(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> Iterator[None]:
    """``model`` with its parameters and buffers replaced by ``state`` for the duration of a ``with`` block, tied
    tensors kept tied: ``torch.nn.utils.stateless._reparametrize_module`` (what ``torch.func.functional_call`` runs;
    ``tie_weights=`` and ``strict=`` in every supported torch). On the way out every parameter and buffer slot of
    every module is put back to the very object it held: torch 2.3 to 2.5 restore tied weights as separate tensors
    (an embedding tied to its output layer came back untied, and the user's model trained on with two copies)."""
    from torch.nn.utils.stateless import _reparametrize_module

    slots = [(mod, table, name, obj) for _, mod in model.named_modules(remove_duplicate=False)
             for table in (mod._parameters, mod._buffers) for name, obj in table.items()]
    try:
        with _reparametrize_module(model, state, tie_weights=True, strict=False):
            yield
    finally:
        for mod, table, name, obj in slots:
            if table.get(name, _MISSING) is not obj or name in mod.__dict__:
                mod.__dict__.pop(name, None)
                table[name] = obj


_MISSING = object()


def _fork_rng_takes_meta() -> bool:
    try:
        with torch.random.fork_rng(devices=[], device_type="meta"):
            pass
    except (RuntimeError, AttributeError, TypeError):
        return False
    return True


_META_RNG: bool | None = None


@contextlib.contextmanager
def checkpoint_on_meta() -> Iterator[None]:
    """A block in which activation checkpointing (``torch.utils.checkpoint``, reentrant or not) runs on meta
    tensors. Its backward forks the RNG of the inputs' device type; on torch 2.1 to 2.5 ``torch.random.fork_rng`` knows
    no ``"meta"`` device ("torch has no module of `meta`"), so inside this block checkpoint's device-type guess
    (``torch.utils.checkpoint._infer_device_type``, a module global in every supported torch) says ``"cpu"`` for
    meta tensors: a meta run has no random state to keep. Nothing changes where fork_rng takes ``"meta"``."""
    global _META_RNG
    if _META_RNG is None:
        _META_RNG = _fork_rng_takes_meta()
    if _META_RNG:
        yield
        return
    from torch.utils import checkpoint as cp

    orig = cp._infer_device_type

    def infer(*args: Any) -> str:
        device = orig(*args)
        return "cpu" if device == "meta" else device

    cp._infer_device_type = infer
    try:
        yield
    finally:
        cp._infer_device_type = orig


def _autocast_takes_meta() -> bool:
    try:
        with torch.autocast(device_type="meta", enabled=False):
            pass
    except (RuntimeError, ValueError):
        return False
    return True


_META_AUTOCAST: bool | None = None


@contextlib.contextmanager
def autocast_on_meta() -> Iterator[None]:
    """A block in which ``torch.autocast(device_type="meta", ...)`` works. Model code picks the autocast device from
    its tensors (Hugging Face's rotary embeddings: ``torch.autocast(x.device.type, enabled=False)``), and no torch so
    far accepts ``"meta"`` ("unsupported autocast device_type", "unsupported scalarType"); inside this block it is
    taken as the CPU's autocast, which leaves meta tensors alone (the cost model applies autocast itself). The class
    ``torch.amp.autocast_mode.autocast`` is the same object as ``torch.autocast`` in every supported torch."""
    global _META_AUTOCAST
    if _META_AUTOCAST is None:
        _META_AUTOCAST = _autocast_takes_meta()
    if _META_AUTOCAST:
        yield
        return
    from torch.amp.autocast_mode import autocast

    orig = autocast.__init__

    def init(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        orig(self, "cpu" if device_type == "meta" else device_type, *args, **kwargs)

    autocast.__init__ = init
    try:
        yield
    finally:
        autocast.__init__ = orig


# ------------------------------------------------------------------------------------------------ compile
def force_eager() -> contextlib.AbstractContextManager:
    """A block in which ``torch.compile``d modules run their Python code eagerly (so the cost model sees their ops):
    ``torch.compiler.set_stance("force_eager")`` where it exists (2.13; not 2.5); else ``torch._dynamo.config.disable``,
    which Dynamo's frame callback reads to leave every frame uncompiled (2.1 to 2.5)."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is not None:
        return set_stance("force_eager")
    from torch._dynamo import config

    return config.patch(disable=True)


def is_compiling() -> bool:
    """True while Dynamo traces (``torch.compiler.is_compiling`` from torch 2.3, ``torch._dynamo.is_compiling``
    before)."""
    fn = getattr(torch.compiler, "is_compiling", None)
    if fn is None:
        from torch._dynamo import is_compiling as fn
    return bool(fn())


# ------------------------------------------------------------------------------------------------ autocast
def _autocast_state(device: str) -> tuple[bool, torch.dtype | None]:
    if hasattr(torch, "get_autocast_dtype"):  # 2.5 and later: one API for every device type
        try:
            if torch.is_autocast_enabled(device):
                return True, torch.get_autocast_dtype(device)
        except (RuntimeError, TypeError):  # a device type this build does not know
            pass
        return False, None
    if device == "cuda":
        return (True, torch.get_autocast_gpu_dtype()) if torch.is_autocast_enabled() else (False, None)
    if device == "cpu":
        return (True, torch.get_autocast_cpu_dtype()) if torch.is_autocast_cpu_enabled() else (False, None)
    return False, None


def autocast_dtype(devices: Sequence[str] = ("cuda", "cpu")) -> torch.dtype | None:
    """The dtype of the first of ``devices`` whose autocast is on, or None (``torch.get_autocast_dtype(device)`` where
    it exists, 2.5 and later; ``get_autocast_gpu_dtype`` / ``get_autocast_cpu_dtype`` before)."""
    for dev in devices:
        on, dt = _autocast_state(dev)
        if on:
            return dt
    return None



# ------------------------------------------------------------------------------------------------ convolution
def conv_backend_name(x: torch.Tensor, weight: torch.Tensor, stride: Sequence[int], padding: Sequence[int],
                      dilation: Sequence[int], groups: int) -> str | None:
    """The backend PyTorch picks for this convolution on these tensors' device (``"slow2d"``, ``"mkldnn..."``,
    lower case), asked of ``torch._C._select_conv_backend`` (the dispatcher's own choice; same signature in every
    supported torch), or None when this torch cannot say."""
    fn = getattr(torch._C, "_select_conv_backend", None)
    if fn is None:
        return None
    try:
        b = fn(x, weight, None, list(stride), list(padding), list(dilation), False, [0] * len(stride), groups, None)
    except (RuntimeError, TypeError, ValueError):  # a shape it refuses
        return None
    return str(b).rsplit(".", 1)[-1].lower()


# ------------------------------------------------------------------------------------------------ optimizers
def tensor_version(t: torch.Tensor) -> int:
    """A tensor's version counter (``Tensor._version``, every supported torch): it grows with every in-place change,
    so an optimizer's update of a parameter shows without any hook."""
    return int(t._version)


def optimizer_hooks_fire() -> bool:
    """Whether ``torch.optim`` optimizers run their step hooks (global and per instance). torch 2.1's Dynamo, the
    first time ``torch.compile`` is called in a process, unwraps the step of every ``torch.optim`` class and marks it
    hooked: from then on no step hook runs. Probed on a one-element SGD each call (it can change as the run goes)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    seen = []
    p = torch.nn.Parameter(torch.zeros(1))
    p.grad = torch.zeros(1)
    handle = register_optimizer_step_post_hook(lambda *a: seen.append(1))
    try:
        torch.optim.SGD([p], lr=0.0).step()
    finally:
        handle.remove()
    return bool(seen)
