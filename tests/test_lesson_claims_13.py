"""Notebook 13 (a model that writes): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

import numpy as np
import pytest
from lesson_claims import Claims

from mha_core.teaching import cross_attention_exercises, decoder_exercises
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


@CLAIMS(
    r"`project(x, name)` multiplies `x` by the trained weight $W_{name}$",
    after="_, _, _, counted = greedy_with(",
)
def project_is_the_trained_weight_and_records_each_call(params, model_cfg):
    layer = cross_attention_exercises.cross_layer(params, model_cfg.n_heads)
    x = np.random.default_rng(0).standard_normal((3, model_cfg.d_model))
    for name in "QKVO":
        np.testing.assert_array_equal(layer.project(x, name), x @ params[f"cross.W_{name}"])
    assert [(step, name, rows) for step, name, rows in layer.calls] == [(0, n, 3) for n in "QKVO"]


@CLAIMS(
    r"memory goes through $W_K$ and $W_V$ once, at the first step; after that each step projects only",
    after="_, _, _, counted = greedy_with(",
)
def the_encoder_side_cache_projects_k_and_v_once(counted, held, steps, task):
    B = len(held["src"])
    assert counted.counts("K") == counted.counts("V") == (1, B * task.n)
    assert counted.counts("K", after_first_step=True) == counted.counts("V", after_first_step=True) == (0, 0)
    assert counted.counts("Q") == counted.counts("O") == (steps, steps * B)  # one new row per source per step


@CLAIMS(
    r"the pads are on the left, so source",
    after="def cross_attention(x_t, t, memory, n_src, layer, cache):",
)
def the_real_positions_are_the_last_n_src(held, task):
    P = task.n
    for row, n in zip(held["src"], held["n_src"], strict=True):
        assert (row[: P - n] == seq2seq.PAD).all()
        assert (row[P - n:] != seq2seq.PAD).all()


@CLAIMS(
    r"a dict that is empty at $t = 0$ and is the same dict at every later step of the same",
    after="def cross_attention(x_t, t, memory, n_src, layer, cache):",
)
def the_cache_is_one_dict_per_batch_of_sources(params, held, model_cfg):
    seen = []

    def spy(x_t, t, memory, n_src, layer, cache):
        seen.append((t, id(cache), len(cache)))
        return cross_attention_exercises.library_cross_attention(x_t, t, memory, n_src, layer, cache)

    one = {k: v[:3] for k, v in held.items()}
    cross_attention_exercises.greedy_with(spy, params, one["src"], one["n_src"], model_cfg.n_heads)
    assert seen[0][0] == 0 and seen[0][2] == 0  # empty at the first step
    assert len({ident for _, ident, _ in seen}) == 1  # the same dict at every step
    assert all(size > 0 for _, _, size in seen[1:])


@CLAIMS(
    r"right answer so far, so every step gets the same `x_t` whatever yours returns",
    after="def cross_attention(x_t, t, memory, n_src, layer, cache):",
)
def teacher_forcing_gives_every_step_the_same_stream(params, held, model_cfg):
    one = {k: v[:3] for k, v in held.items()}

    def zeros(x_t, t, memory, n_src, layer, cache):
        return np.zeros_like(x_t), np.zeros((len(x_t), layer.n_heads, memory.shape[1]))

    runs = [cross_attention_exercises.greedy_with(fn, params, one["src"], one["n_src"], model_cfg.n_heads,
                                                  teacher=one["tgt_in"])
            for fn in (cross_attention_exercises.library_cross_attention, zeros)]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])  # the streams x_t, (B, T, d_model)


@CLAIMS(
    r"It names the classic mistakes: the pads not masked, or masked on the wrong side",
    after="def cross_attention(x_t, t, memory, n_src, layer, cache):",
)
def the_cross_checker_names_the_listed_mistakes():
    names = {m.name for m in cross_attention_exercises.CROSS_MISTAKES}
    assert {"no_padding_mask", "mask_wrong_side", "kv_from_decoder", "q_from_encoder", "causal_mask",
            "no_scale"} <= names


@CLAIMS(
    r"through $W_K$ and $W_V$ once, and each step projects only its new query.",
    after="_, _, _, counted = greedy_with(",
)
def the_recap_counts_the_cache(counted, steps):
    assert counted.counts("K")[0] == counted.counts("V")[0] == 1
    assert counted.counts("Q")[0] == steps


@CLAIMS(
    r"`scaled_dot_product_attention` is refused.",
    after="def cross_attention(x_t, t, memory, n_src, layer, cache):",
)
def the_scaled_dot_product_is_the_readers():
    refused = cross_attention_exercises._REFUSED
    assert "scaled_dot_product_attention" in refused
    assert not {"softmax", "split_heads", "merge_heads"} & set(refused)


test_quotes, test_claim = CLAIMS.tests(marks=(pytest.mark.models,))
