"""Reference model zoo: the Fulcrum / Pagoda workloads in plain torch (no torchvision, no downloaded weights).

    >>> from lightning_edge import zoo
    >>> entry = zoo.get("resnet18")
    >>> model = entry.build(device="meta")           # no memory allocated
    >>> inputs = entry.inputs(batch_size=16, device="meta")

Models: ``resnet18``, ``resnet50``, ``mobilenet_v2``, ``mobilenet_v3_large``, ``yolov8n``, ``lstm``,
``bert_base``, ``bert_large``. See docs/zoo.md for parameter counts, inputs and sources.
"""

from __future__ import annotations

from .bert import (
    BertConfig,
    BertModel,
    BertOutput,
    bert_base,
    bert_base_inputs,
    bert_large,
    bert_large_inputs,
)
from .lstm_lm import LSTMLanguageModel, lstm, lstm_inputs
from .mobilenet import (
    MobileNetV2,
    MobileNetV3,
    mobilenet_v2,
    mobilenet_v2_inputs,
    mobilenet_v3_large,
    mobilenet_v3_large_inputs,
)
from .registry import ZooEntry, aliases, entries, get, names
from .resnet import ResNet, resnet18, resnet18_inputs, resnet50, resnet50_inputs
from .yolo import YOLOv8, yolov8n, yolov8n_inputs

__all__ = [
    "ZooEntry",
    "get",
    "names",
    "entries",
    "aliases",
    "ResNet",
    "resnet18",
    "resnet18_inputs",
    "resnet50",
    "resnet50_inputs",
    "MobileNetV2",
    "MobileNetV3",
    "mobilenet_v2",
    "mobilenet_v2_inputs",
    "mobilenet_v3_large",
    "mobilenet_v3_large_inputs",
    "YOLOv8",
    "yolov8n",
    "yolov8n_inputs",
    "LSTMLanguageModel",
    "lstm",
    "lstm_inputs",
    "BertConfig",
    "BertModel",
    "BertOutput",
    "bert_base",
    "bert_base_inputs",
    "bert_large",
    "bert_large_inputs",
]
