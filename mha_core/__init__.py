"""mha_core: multi-head attention in plain NumPy, written to be read.

Where things live (one concept per module):

    config     MHAConfig, init_params          the layer's sizes and weights
    heads      split_heads, merge_heads        (N, h*d) <-> (h, N, d)
    masks      causal_mask, padding_mask       True = may attend
    softmax    softmax                         stable, mask-aware
    attention  scaled_dot_product_attention   one head (or many, batched)
    mha        multi_head_attention, multi_head_attention_per_head, head_outputs, head_contributions
    counts     count_params, count_macs, kv_cache_bytes
    trace      Tracer, trace_shapes, trace_config
    pitfalls   the classic mistakes, on purpose  (import mha_core.pitfalls; for notebook 07 and checkers)
    exercises  check_* -> Feedback             (import mha_core.exercises; the notebooks' exercises)
    backward   *_forward -> cache, *_backward   hand-written gradients of attention and MHA
    tasks      OffsetPairTask                  a toy task that needs two relationships at once
    trainer    train, accuracy, head_ablation  a tiny NumPy model trained with Adam
    pretrained load, attention_maps            shipped trained weights (notebook 08, dashboard)
    demo       SENTENCE, PASSAGE, embed_tokens the demo sentence and its (N, d_model) input
    viz        HeadGrid, ledger_html, draw_shape_boxes   figures (import mha_core.viz)
    widgets    shape_explorer, head_explorer, cost_panel, kv_cache_panel   the dashboard's panels

Conventions: ``Q = X @ W_Q`` with ``W_Q`` of shape ``(d_model, h*d_k)``; inputs ``(N, d_model)``
or ``(B, N, d_model)``; symbols ``B, N, d_model, h, d_k, d_v, n_kv`` throughout.
"""

from ._checks import DEFAULT_MAX_SCORE_BYTES, MemoryBudgetError
from .attention import scaled_dot_product_attention
from .config import MHAConfig, init_params
from .counts import count_macs, count_params, kv_cache_bytes
from .heads import head_columns, merge_heads, split_heads
from .masks import causal_mask, padding_mask
from .mha import (
    head_contributions,
    head_outputs,
    multi_head_attention,
    multi_head_attention_per_head,
)
from .softmax import softmax
from .trace import Tracer, trace_config, trace_shapes

__all__ = [
    "DEFAULT_MAX_SCORE_BYTES",
    "MHAConfig",
    "MemoryBudgetError",
    "Tracer",
    "causal_mask",
    "count_macs",
    "count_params",
    "head_columns",
    "head_contributions",
    "head_outputs",
    "init_params",
    "kv_cache_bytes",
    "merge_heads",
    "multi_head_attention",
    "multi_head_attention_per_head",
    "padding_mask",
    "scaled_dot_product_attention",
    "softmax",
    "split_heads",
    "trace_config",
    "trace_shapes",
]
