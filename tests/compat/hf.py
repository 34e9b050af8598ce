"""Tiny Hugging Face models for the tests (small configs, no weights downloaded), and the gate that skips them where
the installed ``transformers`` cannot run on this torch: one home for every test that builds one (tests/compat and
tests/cost/test_golden_counts.py)."""

from __future__ import annotations

import logging

import pytest
import torch


def transformers_or_skip():
    """``transformers``, or skip (at module level too) saying why: not installed, or a version that does not
    support this torch (transformers 5 disables its torch support below torch 2.6: JetPack 6 stacks take 4.x)."""
    tr = pytest.importorskip("transformers")
    from transformers.utils import is_torch_available

    if not is_torch_available():
        pytest.skip(f"transformers {tr.__version__} does not support torch {torch.__version__} (transformers 5 needs "
                    "torch >= 2.6): install transformers<5 on this stack (noxfile.py pins it)",
                    allow_module_level=True)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    tr.logging.set_verbosity_error()
    return tr


B, L, V = 2, 16, 96
HIDDEN, HEADS = 32, 4


def _ids():
    g = torch.Generator().manual_seed(0)
    return torch.randint(3, V, (B, L), generator=g)


def bert():
    transformers = transformers_or_skip()
    cfg = transformers.BertConfig(vocab_size=V, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=HEADS,
                                  intermediate_size=64, num_labels=3, max_position_embeddings=64)
    ids = _ids()
    return (transformers.BertForSequenceClassification(cfg),
            {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 2])})


def gpt2():
    transformers = transformers_or_skip()
    cfg = transformers.GPT2Config(vocab_size=V, n_embd=HIDDEN, n_layer=2, n_head=HEADS, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    ids = _ids()
    return transformers.GPT2LMHeadModel(cfg), {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def llama():
    transformers = transformers_or_skip()
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=64,
                                   attn_implementation="sdpa", bos_token_id=0, eos_token_id=0, pad_token_id=0)
    ids = _ids()
    return transformers.LlamaForCausalLM(cfg), {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def llama_mha():
    """The tiny Llama with as many key/value heads as query heads (no grouped-query attention)."""
    transformers = transformers_or_skip()
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=HEADS, num_key_value_heads=HEADS, max_position_embeddings=64,
                                   attn_implementation="sdpa", bos_token_id=0, eos_token_id=0, pad_token_id=0)
    ids = _ids()
    return transformers.LlamaForCausalLM(cfg), {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def t5():
    transformers = transformers_or_skip()
    cfg = transformers.T5Config(vocab_size=V, d_model=HIDDEN, d_ff=64, d_kv=8, num_layers=2, num_heads=HEADS,
                                decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    ids = _ids()
    return (transformers.T5ForConditionalGeneration(cfg),
            {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})


def vit():
    transformers = transformers_or_skip()
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=HIDDEN, num_hidden_layers=2,
                                 num_attention_heads=HEADS, intermediate_size=64, num_labels=3)
    return (transformers.ViTForImageClassification(cfg),
            {"pixel_values": torch.randn(B, 3, 32, 32), "labels": torch.tensor([0, 1])})


def whisper():
    transformers = transformers_or_skip()
    cfg = transformers.WhisperConfig(vocab_size=V, d_model=HIDDEN, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=16,
                                     max_target_positions=32, pad_token_id=0, decoder_start_token_id=1,
                                     bos_token_id=1, eos_token_id=2)
    return (transformers.WhisperForConditionalGeneration(cfg),
            {"input_features": torch.randn(B, 8, 32), "labels": _ids()})


MODELS = {"bert": bert, "gpt2": gpt2, "llama": llama, "t5": t5, "vit": vit, "whisper": whisper}
