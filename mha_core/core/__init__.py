"""The core: attention maths in NumPy, one module per concept. Imports nothing else of mha_core."""

from .attention import scaled_dot_product_attention
from .checks import DEFAULT_MAX_SCORE_BYTES, MemoryBudgetError
from .config import MHAConfig, init_params
from .counts import count_macs, count_params, kv_cache_bytes
from .decode import KVCache, decode, decode_step, init_kv_cache, prefill
from .flash import blocked_attention, flash_attention
from .heads import head_columns, merge_heads, split_heads
from .layer_args import check_layer_args
from .ledger import trace_config, trace_shapes
from .masks import causal_mask, padding_mask
from .mha import (
    head_contributions,
    head_outputs,
    multi_head_attention,
    multi_head_attention_per_head,
)
from .rope import apply_rope, rope_angles
from .softmax import softmax
from .trace import Tracer

__all__ = [
    "DEFAULT_MAX_SCORE_BYTES",
    "KVCache",
    "MHAConfig",
    "MemoryBudgetError",
    "Tracer",
    "apply_rope",
    "blocked_attention",
    "causal_mask",
    "check_layer_args",
    "count_macs",
    "count_params",
    "decode",
    "decode_step",
    "flash_attention",
    "head_columns",
    "head_contributions",
    "head_outputs",
    "init_kv_cache",
    "init_params",
    "kv_cache_bytes",
    "merge_heads",
    "multi_head_attention",
    "multi_head_attention_per_head",
    "padding_mask",
    "prefill",
    "rope_angles",
    "scaled_dot_product_attention",
    "softmax",
    "split_heads",
    "trace_config",
    "trace_shapes",
]
