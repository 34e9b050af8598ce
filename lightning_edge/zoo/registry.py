"""The zoo registry: canonical names, aliases, builders, example inputs and reference parameter counts."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from torch import Tensor, nn

from . import bert, lstm_lm, mobilenet, resnet, yolo

__all__ = ["ZooEntry", "get", "names", "entries", "aliases"]

Task = Literal["vision", "detection", "text"]


@dataclass(frozen=True)
class ZooEntry:
    """One reference model.

    ``build(**kwargs)`` returns the model (accepts ``device=`` and ``dtype=``; ``device="meta"`` allocates
    nothing); ``inputs(batch_size=1, ..., device=None)`` returns the positional inputs, so
    ``model(*entry.inputs(batch_size=4))`` runs it. ``params`` is the exact count our build has;
    ``reference_params`` the published one it is checked against.
    """

    name: str
    build: Callable[..., nn.Module]
    inputs: Callable[..., tuple[Tensor, ...]]
    task: Task
    reference_params: int
    params: int
    input_shape: str
    description: str
    source: str
    aliases: tuple[str, ...] = field(default=())

    @property
    def params_rel_error(self) -> float:
        """``(params - reference_params) / reference_params``."""
        return (self.params - self.reference_params) / self.reference_params


_ENTRIES: tuple[ZooEntry, ...] = (
    ZooEntry(
        name="resnet18",
        build=resnet.resnet18,
        inputs=resnet.resnet18_inputs,
        task="vision",
        reference_params=resnet.RESNET18_PARAMS,
        params=11_689_512,
        input_shape="(N, 3, 224, 224) float",
        description="ResNet-18, ImageNet classifier (1000 classes); Fulcrum training workload.",
        source="He et al., Deep Residual Learning for Image Recognition, CVPR 2016; torchvision models/resnet.py",
        aliases=("resnet-18", "rn18"),
    ),
    ZooEntry(
        name="resnet50",
        build=resnet.resnet50,
        inputs=resnet.resnet50_inputs,
        task="vision",
        reference_params=resnet.RESNET50_PARAMS,
        params=25_557_032,
        input_shape="(N, 3, 224, 224) float",
        description="ResNet-50 (V1.5), ImageNet classifier (1000 classes); Fulcrum inference workload.",
        source="He et al., CVPR 2016; torchvision models/resnet.py",
        aliases=("resnet-50", "rn50"),
    ),
    ZooEntry(
        name="mobilenet_v2",
        build=mobilenet.mobilenet_v2,
        inputs=mobilenet.mobilenet_v2_inputs,
        task="vision",
        reference_params=mobilenet.MOBILENET_V2_PARAMS,
        params=3_504_872,
        input_shape="(N, 3, 224, 224) float",
        description="MobileNetV2 (width 1.0), ImageNet classifier (1000 classes).",
        source="Sandler et al., MobileNetV2, CVPR 2018; torchvision models/mobilenetv2.py",
        aliases=("mobilenetv2", "mnv2"),
    ),
    ZooEntry(
        name="mobilenet_v3_large",
        build=mobilenet.mobilenet_v3_large,
        inputs=mobilenet.mobilenet_v3_large_inputs,
        task="vision",
        reference_params=mobilenet.MOBILENET_V3_LARGE_PARAMS,
        params=5_483_032,
        input_shape="(N, 3, 224, 224) float",
        description="MobileNetV3-Large (hard-swish, SE with hard-sigmoid), 1000 classes; Fulcrum's MobileNet.",
        source="Howard et al., Searching for MobileNetV3, ICCV 2019; torchvision models/mobilenetv3.py",
        aliases=("mobilenetv3", "mobilenet_v3", "mobilenetv3large", "mnv3", "mobilenet", "mobnet"),
    ),
    ZooEntry(
        name="yolov8n",
        build=yolo.yolov8n,
        inputs=yolo.yolov8n_inputs,
        task="detection",
        reference_params=yolo.YOLOV8N_PARAMS,
        params=3_157_200,
        input_shape="(N, 3, 640, 640) float in [0, 1]",
        description="YOLOv8n detector (C2f, SPPF, decoupled DFL head, 80 classes); eval output (N, 84, 8400).",
        source="Jocher et al., Ultralytics YOLOv8 (2023), cfg/models/v8/yolov8.yaml, scale n",
        aliases=("yolo", "yolov8", "yolo8n", "yolo_v8n"),
    ),
    ZooEntry(
        name="lstm",
        build=lstm_lm.lstm,
        inputs=lstm_lm.lstm_inputs,
        task="text",
        reference_params=lstm_lm.LSTM_REFERENCE_PARAMS,
        params=lstm_lm.LSTM_PARAMS,
        input_shape="(N, 35) int64 token ids",
        description="2-layer LSTM word LM on WikiText-2 (vocab 29,423, 256-d, tied); Fulcrum's LSTM (8.6M).",
        source=(
            "Fulcrum Table 3 / ref. [53] (Wisam, Language modeling with LSTMs in PyTorch, 2022); sizes from "
            "github.com/dream-lab/pagoda src/analysis/create_onnx_models.ipynb"
        ),
        aliases=("lstm_lm", "word_lm", "lstm_wikitext2"),
    ),
    ZooEntry(
        name="bert_base",
        build=bert.bert_base,
        inputs=bert.bert_base_inputs,
        task="text",
        reference_params=bert.BERT_BASE_PARAMS,
        params=109_482_240,
        input_shape="input_ids, attention_mask: (N, 128) int64",
        description="BERT-base encoder + pooler (L=12, H=768, A=12), SDPA attention; Fulcrum training workload.",
        source="Devlin et al., BERT, NAACL 2019; HuggingFace transformers BertModel (bert-base-uncased)",
        aliases=("bert", "bert_base_uncased"),
    ),
    ZooEntry(
        name="bert_large",
        build=bert.bert_large,
        inputs=bert.bert_large_inputs,
        task="text",
        reference_params=bert.BERT_LARGE_PARAMS,
        params=335_141_888,
        input_shape="input_ids, attention_mask: (N, 128) int64",
        description="BERT-large encoder + pooler (L=24, H=1024, A=16), SDPA attention; Fulcrum inference workload.",
        source="Devlin et al., BERT, NAACL 2019; HuggingFace transformers BertModel (bert-large-uncased)",
        aliases=("bert_large_uncased",),
    ),
)


def _key(name: str) -> str:
    """Case- and separator-insensitive lookup key: 'BERT-base', 'bert_base' and 'bert base' all give 'bertbase'."""
    return re.sub(r"[\s_\-./]+", "", name.strip().lower())


def _build_index() -> dict[str, ZooEntry]:
    index: dict[str, ZooEntry] = {}
    for entry in _ENTRIES:
        for spelling in (entry.name, *entry.aliases):
            k = _key(spelling)
            if k in index and index[k] is not entry:
                raise RuntimeError(f"zoo alias {spelling!r} is ambiguous: {index[k].name} and {entry.name}")
            index[k] = entry
    return index


_INDEX = _build_index()


def names() -> tuple[str, ...]:
    """Canonical model names, in a fixed order."""
    return tuple(e.name for e in _ENTRIES)


def entries() -> tuple[ZooEntry, ...]:
    """All entries, in the order of :func:`names`."""
    return _ENTRIES


def aliases() -> dict[str, str]:
    """Every accepted spelling (canonical names included) -> canonical name."""
    return {a: e.name for e in _ENTRIES for a in (e.name, *e.aliases)}


def get(name: str) -> ZooEntry:
    """The entry for ``name``: a canonical name or an alias, case- and separator-insensitive
    (``"MobileNetV3"``, ``"bert-base"``, ``"ResNet_18"``).

    Raises ``ValueError`` naming the available models when nothing matches.
    """
    if not isinstance(name, str):
        raise TypeError(f"zoo model name must be a str, got {type(name).__name__}")
    entry = _INDEX.get(_key(name))
    if entry is None:
        listing = ", ".join(names())
        raise ValueError(
            f"unknown zoo model {name!r}; available models: {listing} "
            f"(aliases such as 'mobilenetv3', 'bert-base', 'yolo' are accepted, case-insensitively)"
        )
    return entry
