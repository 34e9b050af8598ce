"""Op families, known here once: the counter (BatchNorm folding after a convolution), the formulas and the twin's
workload model (which execution unit runs a layer) share them. aten op names (``aten::`` stripped); no torch import,
so the twin stays light to import."""

from __future__ import annotations

__all__ = ["CONV_OPS", "BATCH_NORM_OPS", "ATTENTION_OPS", "GEMM_OPS"]

CONV_OPS = frozenset({"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution",
                      "mkldnn_convolution", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"})
BATCH_NORM_OPS = frozenset({"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                            "_native_batch_norm_legit_functional", "batch_norm", "cudnn_batch_norm",
                            "miopen_batch_norm", "_batch_norm_with_update", "_batch_norm_no_update"})
ATTENTION_OPS = frozenset({"scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                           "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
                           "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"})
GEMM_OPS = frozenset({"addmm", "mm", "bmm", "matmul", "linear", "baddbmm", "addbmm", "addmv", "mv", "dot",
                      "einsum"})
