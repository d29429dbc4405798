"""Notebook 13 (a model that writes): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

import numpy as np
import pytest
from lesson_claims import Claims

from mha_core.teaching import decoder_exercises
from mha_core.training import seq2seq

NB = "13_a_model_that_writes.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    r"Each key/value head serves $h / n_{kv}$ query heads, side by side: query heads 0, 1 and 2 read",
    after="cfg = layer_config(smol)",
)
def query_heads_0_1_2_read_kv_head_0(cfg):
    group = np.repeat(np.arange(cfg["n_kv_heads"]), cfg["n_heads"] // cfg["n_kv_heads"])  # kv head of each query head
    assert group[:3].tolist() == [0, 0, 0]
    assert group[3] == 1


@CLAIMS(
    r"and names the classic mistakes: RoPE on `v` or after the scores, the key/value heads",
    after="cfg = layer_config(smol)",
)
def the_layer_checker_names_the_listed_mistakes():
    names = {m.name for m in decoder_exercises.DECODER_MISTAKES}
    assert {"rope_on_v", "rope_on_scores", "rope_after_attention", "kv_tiled", "layer_norm", "eps_outside_sqrt",
            "no_attention_residual", "no_ffn_residual", "no_causal_mask", "silu_gate_swapped"} <= names


@CLAIMS(
    r"It names RoPE positions that do not advance,",
    after="parts = decoder_parts(smol)",
)
def the_loop_checker_names_the_listed_mistakes():
    assert {"positions_not_advanced", "cache_appended_twice", "no_self_attention", "keys_cached_before_rope",
            "last_prompt_token_twice"} <= {m.name for m in decoder_exercises.LOOP_MISTAKES}


@CLAIMS(
    r"The test set below holds sequences the training never saw.",
    after="params, record = seq2seq.load_reverse()",
)
def the_test_set_is_held_out(held, task):
    P = task.n  # each row's L digits, moved to the left as the hash reads them
    digits = np.array([np.pad(row[P - n:], (0, task.max_len - n))
                       for row, n in zip(held["src"], held["lengths"], strict=True)])
    assert seq2seq._held_out(digits, held["lengths"]).all()


@CLAIMS(
    r"here it is full before the first step and never changes.",
    after="cache = seq2seq.encoder_cache(",
)
def the_encoder_side_cache_covers_the_whole_source(cache, task, model_cfg):
    assert cache.K.shape == (1, model_cfg.n_heads, task.n, model_cfg.d_model // model_cfg.n_heads)


@CLAIMS(
    r"Both heads learned the alignment: the bright cells run along the anti-diagonal",
    after="cache = seq2seq.encoder_cache(",
)
def both_heads_align(on_diag, ev, maps, L):
    assert min(on_diag) > 0.5 and min(ev["aligned_weight"]) > 0.5  # most of the weight, in this map and on average
    assert all(int(np.argmax(maps[0, hd, t])) == maps.shape[-1] - 1 - t for hd in range(maps.shape[1]) for t in range(L + 1))


@CLAIMS(
    r"The pad columns stay at zero",
    after="cache = seq2seq.encoder_cache(",
)
def pads_get_no_weight(maps, one):
    pads = maps.shape[-1] - int(one["n_src"][0])
    assert pads >= 1
    assert (maps[0, :, :, :pads] == 0).all()


test_quotes, test_claim = CLAIMS.tests(marks=(pytest.mark.models,))
