"""The core: the attention the lessons teach, in NumPy, one module per concept.

Imports nothing else of mha_core. Every public function checks its arguments at the door
(``validate.py``) and then runs its formula; ``f.unchecked`` is the formula alone.
"""

from .attention import scaled_dot_product_attention, softmax
from .config import MHAConfig, init_params
from .counts import count_macs, count_params, kv_cache_bytes
from .decode import KVCache, decode, decode_step, init_kv_cache, prefill
from .ledger import Ledger, head_contributions, head_outputs, trace_config, trace_shapes
from .masks import causal_mask, padding_mask
from .mha import (
    head_columns,
    merge_heads,
    multi_head_attention,
    multi_head_attention_per_head,
    split_heads,
)
from .rope import apply_rope, rope_angles
from .tiled import tiled_attention
from .validate import BIAS_NAMES, DEFAULT_MAX_SCORE_BYTES, WEIGHT_NAMES, MemoryBudgetError

__all__ = [
    "BIAS_NAMES", "DEFAULT_MAX_SCORE_BYTES", "KVCache", "Ledger", "MHAConfig", "MemoryBudgetError",
    "WEIGHT_NAMES", "apply_rope", "causal_mask", "count_macs", "count_params", "decode",
    "decode_step", "head_columns", "head_contributions", "head_outputs", "init_kv_cache",
    "init_params", "kv_cache_bytes", "merge_heads", "multi_head_attention",
    "multi_head_attention_per_head", "padding_mask", "prefill", "rope_angles",
    "scaled_dot_product_attention", "softmax", "split_heads", "tiled_attention", "trace_config",
    "trace_shapes"
]
