"""The 2-layer LSTM word-level language model of the Fulcrum paper (next-word prediction on WikiText-2).

Which LSTM: Fulcrum (Table 3) lists "LSTM [53], 2 layers, 8.6M params, WikiText", citing E. Wisam,
"Language modeling with LSTMs in PyTorch", Towards Data Science, 2022. That model is
``Embedding -> Dropout -> nn.LSTM(batch_first=True) -> Dropout -> Linear`` with the embedding tied to the
output projection. The article itself uses 1024-wide layers (about 47M parameters), so it is not the 8.6M
model. The same group's Pagoda repository (github.com/dream-lab/pagoda, ``src/analysis/create_onnx_models.ipynb``)
exports exactly this class with ``vocab_size=29423`` (torchtext WikiText-2, ``basic_english`` tokenizer,
``min_freq=3``), ``embedding_dim = hidden_dim = 256``, 2 layers, tied weights, dropout 0.2:

    tied embedding / fc weight   29423 x 256            = 7,532,288
    fc bias                      29423                  =    29,423
    LSTM, per layer              4 x (256*256*2 + 2*256) =   526,336   (x 2 layers = 1,052,672)
    total                                                 = 8,614,383   (paper: 8.6M)

This is the model built here. (The PyTorch ``word_language_model`` example, vocab 33,278, 200-wide, untied,
has 13,987,678 parameters, far from 8.6M; pass ``vocab_size=33278`` etc. to build variants.)
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor, nn

from ._common import DeviceLike, example_tokens, finish, on_device

__all__ = [
    "LSTMLanguageModel",
    "lstm",
    "lstm_inputs",
    "LSTM_VOCAB_SIZE",
    "LSTM_PARAMS",
    "LSTM_REFERENCE_PARAMS",
]

#: torchtext WikiText-2 vocabulary with the basic_english tokenizer and min_freq=3 (as Pagoda's export).
LSTM_VOCAB_SIZE = 29_423
#: exact count of the model built by :func:`lstm` with defaults (tied weights counted once).
LSTM_PARAMS = 8_614_383
#: what the Fulcrum paper reports (Table 3), rounded there to 8.6M.
LSTM_REFERENCE_PARAMS = 8_600_000

Hidden = Tuple[Tensor, Tensor]  # runtime alias: Python 3.8's typing


class LSTMLanguageModel(nn.Module):
    """Embedding, stacked LSTM, dropout, linear decoder over the vocabulary (weights optionally tied)."""

    def __init__(
        self,
        vocab_size: int = LSTM_VOCAB_SIZE,
        embedding_dim: int = 256,
        hidden_dim: int = 256,
        num_layers: int = 2,
        dropout_rate: float = 0.2,
        tie_weights: bool = True,
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.embedding_dim = embedding_dim
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(
            embedding_dim, hidden_dim, num_layers=num_layers, dropout=dropout_rate, batch_first=True
        )
        self.dropout = nn.Dropout(dropout_rate)
        self.fc = nn.Linear(hidden_dim, vocab_size)
        if tie_weights:
            if embedding_dim != hidden_dim:
                raise ValueError(
                    f"cannot tie weights: embedding_dim ({embedding_dim}) != hidden_dim ({hidden_dim}); "
                    "make them equal or pass tie_weights=False"
                )
            self.embedding.weight = self.fc.weight
        self.init_weights()

    def init_weights(self) -> None:
        """The article's init: embedding U(-0.1, 0.1), decoder U(-1/sqrt(h), 1/sqrt(h)) (wins when tied), bias 0.

        The LSTM keeps PyTorch's default U(-1/sqrt(h), 1/sqrt(h)), which is what the article's loop amounts to.
        """
        r = 1.0 / math.sqrt(self.hidden_dim)
        with torch.no_grad():
            self.embedding.weight.uniform_(-0.1, 0.1)
            self.fc.weight.uniform_(-r, r)
            self.fc.bias.zero_()

    def init_hidden(self, batch_size: int, device: DeviceLike = None) -> Hidden:
        """Zero ``(h, c)``, each ``(num_layers, batch_size, hidden_dim)``."""
        w = self.fc.weight
        shape = (self.num_layers, batch_size, self.hidden_dim)
        dev = w.device if device is None else device
        return torch.zeros(shape, device=dev, dtype=w.dtype), torch.zeros(shape, device=dev, dtype=w.dtype)

    def step(self, tokens: Tensor, hidden: Hidden | None = None) -> tuple[Tensor, Hidden]:
        """Forward carrying state, for truncated BPTT: returns ``(logits, (h, c))``."""
        emb = self.dropout(self.embedding(tokens))
        out, hidden = self.lstm(emb, hidden)
        return self.fc(self.dropout(out)), hidden

    def forward(self, tokens: Tensor) -> Tensor:
        """``tokens``: int64 ids ``(N, T)``; returns next-token logits ``(N, T, vocab_size)`` (zero initial state)."""
        return self.step(tokens)[0]


def lstm(
    vocab_size: int = LSTM_VOCAB_SIZE,
    device: DeviceLike = None,
    dtype: torch.dtype | None = None,
    embedding_dim: int = 256,
    hidden_dim: int = 256,
    num_layers: int = 2,
    dropout_rate: float = 0.2,
    tie_weights: bool = True,
) -> LSTMLanguageModel:
    """The Fulcrum LSTM language model; 8,614,383 parameters with the defaults. Built directly on ``device``."""
    with on_device(device):
        model = LSTMLanguageModel(
            vocab_size, embedding_dim, hidden_dim, num_layers, dropout_rate, tie_weights
        )
    return finish(model, dtype)


def lstm_inputs(
    batch_size: int = 1,
    seq_len: int = 35,
    device: DeviceLike = None,
    dtype: torch.dtype | None = None,
    vocab_size: int = LSTM_VOCAB_SIZE,
    seed: int = 0,
) -> tuple[Tensor]:
    """Token ids ``(batch_size, seq_len)`` (int64). ``seq_len`` 35 is the usual WikiText-2 BPTT window
    (Pagoda's ONNX export used 32). ``dtype`` is accepted for a uniform signature and ignored: ids are int64."""
    del dtype
    return (example_tokens((batch_size, seq_len), vocab_size, device, seed),)
