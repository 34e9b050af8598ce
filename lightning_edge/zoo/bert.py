"""BERT-base and BERT-large encoders, laid out like HuggingFace ``transformers.BertModel``.

Source: J. Devlin, M.-W. Chang, K. Lee, K. Toutanova, "BERT: Pre-training of Deep Bidirectional Transformers
for Language Understanding", NAACL 2019 (arXiv:1810.04805); module layout and names of HuggingFace
``transformers/models/bert/modeling_bert.py`` (``bert-base-uncased`` / ``bert-large-uncased`` configs), so HF
state dicts load as-is: embeddings (word / position / token_type + LayerNorm), N encoder layers (self-attention
query/key/value, attention output dense + LayerNorm, intermediate dense + GELU, output dense + LayerNorm)
and the pooler (dense + tanh on the first token).

Attention is computed with ``F.scaled_dot_product_attention`` (``attn_implementation="sdpa"``, the default,
as HF's ``BertSdpaSelfAttention``). SDPA is a single functional call with no module of its own, so a
counter must see it at the aten level (attributed to the ``...attention.self`` module). For counters that only
understand matmul + softmax, ``attn_implementation="eager"`` computes the same thing explicitly
(``q @ k.transpose(-1, -2) / sqrt(d)``, softmax, dropout, ``@ v``), as HF's eager ``BertSelfAttention``.

Parameter counts (with pooler): BERT-base 109,482,240; BERT-large 335,141,888 (vocab 30,522, 512 positions,
2 token types):
    base:  embeddings 23,837,184 + 12 x 7,087,872 + pooler 590,592
    large: embeddings 31,782,912 + 24 x 12,596,224 + pooler 1,049,600
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._common import DeviceLike, example_tokens, finish, on_device

__all__ = [
    "BertConfig",
    "BertOutput",
    "BertModel",
    "BERT_BASE",
    "BERT_LARGE",
    "bert_base",
    "bert_large",
    "bert_base_inputs",
    "bert_large_inputs",
    "BERT_BASE_PARAMS",
    "BERT_LARGE_PARAMS",
]

#: HF ``BertModel`` bert-base-uncased, pooler included.
BERT_BASE_PARAMS = 109_482_240
#: HF ``BertModel`` bert-large-uncased, pooler included.
BERT_LARGE_PARAMS = 335_141_888


@dataclass(frozen=True)
class BertConfig:
    """The subset of HF ``BertConfig`` that shapes the encoder."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    pad_token_id: int = 0
    initializer_range: float = 0.02
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    add_pooling_layer: bool = True


BERT_BASE = BertConfig()
BERT_LARGE = BertConfig(
    hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
)


class BertOutput(NamedTuple):
    """``(last_hidden_state (N, T, H), pooler_output (N, H) or None)``, HF's ``return_dict=False`` order."""

    last_hidden_state: Tensor
    pooler_output: Tensor | None


class BertEmbeddings(nn.Module):
    """Sum of word, absolute position and token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False
        )
        self.register_buffer(
            "token_type_ids",
            torch.zeros((1, config.max_position_embeddings), dtype=torch.long),
            persistent=False,
        )

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        batch, seq_len = input_ids.shape
        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :seq_len].expand(batch, seq_len)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(self.position_ids[:, :seq_len])
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    """Multi-head self-attention: Q/K/V projections and softmax(QK^T / sqrt(d)) V, via SDPA or explicitly."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        if config.hidden_size % config.num_attention_heads:
            raise ValueError(
                f"hidden_size {config.hidden_size} is not a multiple of num_attention_heads "
                f"{config.num_attention_heads}"
            )
        if config.attn_implementation not in ("sdpa", "eager"):
            raise ValueError(
                f"attn_implementation must be 'sdpa' or 'eager', got {config.attn_implementation!r}"
            )
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = config.hidden_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout_prob = config.attention_probs_dropout_prob
        self.attn_implementation = config.attn_implementation

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_attention_heads, self.attention_head_size).transpose(1, 2)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """``attention_mask``: additive, broadcastable to ``(N, heads, T, T)`` (0 keep, large negative drop)."""
        b, t, _ = hidden_states.shape
        q = self._heads(self.query(hidden_states))
        k = self._heads(self.key(hidden_states))
        v = self._heads(self.value(hidden_states))
        p = self.dropout_prob if self.training else 0.0
        if self.attn_implementation == "sdpa":
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=p)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.attention_head_size)
            if attention_mask is not None:
                scores = scores + attention_mask
            probs = F.dropout(scores.softmax(dim=-1), p=p, training=self.training)
            ctx = probs @ v
        return ctx.transpose(1, 2).reshape(b, t, self.all_head_size)


class BertSelfOutput(nn.Module):
    """Attention output projection, dropout, residual add and LayerNorm (post-LN)."""

    def __init__(self, config: BertConfig, in_features: int | None = None) -> None:
        super().__init__()
        self.dense = nn.Linear(in_features or config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertAttention(nn.Module):
    """Self-attention followed by its output block (HF names: ``self``, ``output``)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(nn.Module):
    """Feed-forward expansion H -> 4H with exact (erf) GELU."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertLayerOutput(BertSelfOutput):
    """Feed-forward contraction 4H -> H, dropout, residual add and LayerNorm (HF ``BertOutput``)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config, config.intermediate_size)


class BertLayer(nn.Module):
    """One transformer encoder layer."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertLayerOutput(config)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        attn = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(attn), attn)


class BertEncoder(nn.Module):
    """``num_hidden_layers`` stacked :class:`BertLayer` (HF name ``layer``)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        for layer in self.layer:
            hidden_states = layer(hidden_states, attention_mask)
        return hidden_states


class BertPooler(nn.Module):
    """Dense + tanh over the first ([CLS]) token."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


class BertModel(nn.Module):
    """The BERT encoder with pooler (no task head), as HF ``BertModel``."""

    def __init__(self, config: BertConfig = BERT_BASE) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if config.add_pooling_layer else None
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        """HF's init: N(0, 0.02) for linear and embedding weights, zero biases and padding row, LN = (1, 0)."""
        std = self.config.initializer_range
        with torch.no_grad():
            if isinstance(module, nn.Linear):
                module.weight.normal_(mean=0.0, std=std)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.normal_(mean=0.0, std=std)
                if module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()

    def extended_attention_mask(self, attention_mask: Tensor, dtype: torch.dtype) -> Tensor:
        """``(N, T)`` 1 = attend / 0 = padding -> additive ``(N, 1, 1, T)``: 0 or the dtype's most negative value."""
        mask = attention_mask[:, None, None, :].to(dtype)
        return (1.0 - mask) * torch.finfo(dtype).min

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> BertOutput:
        """``input_ids`` int64 ``(N, T)``, ``attention_mask`` ``(N, T)`` of 1/0 (optional, ``None`` = attend all).

        Returns :class:`BertOutput` ``(last_hidden_state (N, T, H), pooler_output (N, H))``.
        """
        hidden = self.embeddings(input_ids, token_type_ids)
        mask = None if attention_mask is None else self.extended_attention_mask(attention_mask, hidden.dtype)
        hidden = self.encoder(hidden, mask)
        pooled = self.pooler(hidden) if self.pooler is not None else None
        return BertOutput(hidden, pooled)


def _build(
    config: BertConfig, device: DeviceLike, dtype: torch.dtype | None, **overrides: object
) -> BertModel:
    if overrides:
        config = replace(config, **overrides)  # type: ignore[arg-type]
    with on_device(device):
        model = BertModel(config)
    return finish(model, dtype)


def bert_base(
    device: DeviceLike = None,
    dtype: torch.dtype | None = None,
    attn_implementation: str = "sdpa",
    **overrides: object,
) -> BertModel:
    """BERT-base (L=12, H=768, A=12); 109,482,240 parameters with the pooler.

    Built directly on ``device``: ``device="meta"`` allocates no storage. ``overrides`` replace
    :class:`BertConfig` fields (e.g. ``num_hidden_layers=2`` for a small test model).
    """
    return _build(BERT_BASE, device, dtype, attn_implementation=attn_implementation, **overrides)


def bert_large(
    device: DeviceLike = None,
    dtype: torch.dtype | None = None,
    attn_implementation: str = "sdpa",
    **overrides: object,
) -> BertModel:
    """BERT-large (L=24, H=1024, A=16); 335,141,888 parameters with the pooler. Built directly on ``device``."""
    return _build(BERT_LARGE, device, dtype, attn_implementation=attn_implementation, **overrides)


def bert_base_inputs(
    batch_size: int = 1,
    seq_len: int = 128,
    device: DeviceLike = None,
    dtype: torch.dtype | None = None,
    vocab_size: int = 30522,
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    """``(input_ids, attention_mask)``, both int64 ``(batch_size, seq_len)``; the mask is all ones.

    Same pair as the ONNX export in Pagoda (BERT-base and BERT-large alike). ``dtype`` is accepted for a uniform
    signature and ignored.
    """
    del dtype
    if seq_len > BERT_BASE.max_position_embeddings:
        raise ValueError(f"seq_len {seq_len} exceeds BERT's {BERT_BASE.max_position_embeddings} positions")
    input_ids = example_tokens((batch_size, seq_len), vocab_size, device, seed)
    return input_ids, torch.ones((batch_size, seq_len), dtype=torch.long, device=input_ids.device)


bert_large_inputs = bert_base_inputs
