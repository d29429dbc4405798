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
    r"The test set below holds sequences the training never saw:",
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


@CLAIMS(
    r"`self.layer_attention[i]` holds only its four attention weights, `W_Q`, `W_K`, `W_V` and `W_O`",
    after="print(source(type(smol).layer))",
)
def layer_attention_is_the_layers_four_attention_weights(smol):
    import inspect

    for i in (0, smol.n_layers - 1):
        attention = smol.layer_attention[i]
        assert set(attention) == {"W_Q", "W_K", "W_V", "W_O"}
        assert all(attention[k] is smol.layers[i][k] for k in attention)  # the same arrays
    assert "head_mask" in inspect.signature(smol.logits).parameters  # notebook 11's switch


@CLAIMS(
    r"`return_weights=True` also returns",
    after="print(source(type(smol).layer))",
)
def the_layer_returns_the_attention_weights(smol):
    x = smol.hidden_states(smol.encode("One more sentence."))[0]
    _, w = smol.layer(x, 0)
    assert w.shape == (smol.n_heads, x.shape[0], x.shape[0])


@CLAIMS(
    r"`x` comes from the checker: the real residual stream entering that same layer, on a sentence.",
    after="cfg = layer_config(smol)",
)
def x_is_the_stream_entering_the_layer_of_p(smol, p):
    layer = decoder_exercises.DECODER_LAYER
    assert all(np.array_equal(p[k], smol.layers[layer][k]) for k in p)
    (_, x, _), _ = decoder_exercises._layer_cases(smol, layer, decoder_exercises.DECODER_TEXT)
    np.testing.assert_array_equal(x, smol.hidden_states(smol.encode(decoder_exercises.DECODER_TEXT))[layer])


@CLAIMS(
    r"`parts.head(x[-1:])` gives one logit per",
    after="parts = decoder_parts(smol)",
)
def head_gives_one_logit_per_token(parts, x, smol, ids):
    logits = parts.head(x[-1:])
    assert logits.shape == (1, smol.vocab_size)
    last = smol.hidden_states(ids)[-1]  # (N, d_model): the prompt after every layer
    assert int(np.argmax(parts.head(last[-1:])[0])) == next(iter(smol.write(ids, 1))).id  # the first new token


@CLAIMS(
    r"`apply_rope(q, [t], base)`, as in 09 (the second argument lists the positions of the rows)",
    after="parts = decoder_parts(smol)",
)
def apply_rope_at_position_t_is_row_t(parts):
    from mha_core import apply_rope

    q = np.random.default_rng(0).standard_normal((parts.config["n_heads"], 6, parts.config["d_k"]))
    base = parts.config["rope_base"]
    np.testing.assert_allclose(apply_rope(q[:, 5:], [5], base), apply_rope(q, base=base)[:, 5:], rtol=1e-12)


@CLAIMS(
    r"The library's cached attention is allowed too, for the attention",
    after="parts = decoder_parts(smol)",
)
def a_loop_on_the_librarys_cached_attention_passes():
    from mha_core import decode_step, init_kv_cache, multi_head_attention, prefill
    from mha_core.models.blocks import rms_norm, swiglu

    def generate(ids, n_new, parts):
        cfg = parts.config
        h, kw = cfg["n_heads"], {"n_kv_heads": cfg["n_kv_heads"], "rope_base": cfg["rope_base"]}
        attn = [{k: p[k] for k in ("W_Q", "W_K", "W_V", "W_O")} for p in parts.layers]
        caches = [init_kv_cache(a, h, len(ids) + n_new, n_kv_heads=cfg["n_kv_heads"]) for a in attn]

        def ffn(x, p):
            return x + swiglu(rms_norm(x, p["ffn_norm"], cfg["eps"]), p["W_gate"], p["W_up"], p["W_down"])

        x = parts.embed(ids)
        for p, a, c in zip(parts.layers, attn, caches, strict=True):
            xn = rms_norm(x, p["attn_norm"], cfg["eps"])
            assert prefill(xn, a, h, c, **kw) is c and c.length == len(ids)  # fills the cache, no outputs
            x = ffn(x + multi_head_attention(xn, a, h, causal=True, **kw), p)
        out = [int(np.argmax(parts.head(x[-1:])[0]))]
        while len(out) < n_new:
            x = parts.embed([out[-1]])[0]
            for p, a, c in zip(parts.layers, attn, caches, strict=True):
                step = decode_step(rms_norm(x, p["attn_norm"], cfg["eps"]), a, h, c, **kw)  # (d_model,)
                x = ffn((x + step)[None], p)[0]
            out.append(int(np.argmax(parts.head(x[None])[0])))
        return out

    fb = decoder_exercises.check_generation_loop(generate, max_new_tokens=3)
    assert fb.ok, fb.message


@CLAIMS(
    r"The last token written need not go through the layers: no later token",
    after="parts = decoder_parts(smol)",
)
def running_the_last_token_is_named_as_wasted():

    def generate(ids, n_new, parts):  # a cached loop (the library's layer) that also runs its last token
        cfg = parts.config
        caches = [[np.zeros((cfg["n_kv_heads"], 0, cfg["d_k"]), np.float32)] * 2 for _ in parts.layers]

        def run(x, t):
            for p, c in zip(parts.layers, caches, strict=True):
                x = decoder_exercises._cached_layer(x, p, cfg, c, np.arange(t, t + x.shape[0]))
            return x

        x, t, out = run(parts.embed(ids), 0), len(ids), []
        for _ in range(n_new):
            out.append(int(np.argmax(parts.head(x[-1:])[0])))
            x, t = run(parts.embed([out[-1]]), t), t + 1  # n_new tokens after the prompt, one too many
        return out

    fb = decoder_exercises.check_generation_loop(generate, max_new_tokens=3)
    assert not fb.ok and fb.pitfall == "last_token_run", fb.message
    assert "Your tokens are right" in fb.message and "harmless but wasted" in fb.message


@CLAIMS(
    r"and both ways write the same tokens.",
    after="prompt = smol.encode(",
)
def cache_and_recompute_write_the_same_tokens(smol, prompt, tokens):
    assert [s.id for s in smol.write(prompt, len(tokens), use_cache=True)] == tokens
    assert [s.id for s in smol.write(prompt, len(tokens), use_cache=False)] == tokens


@CLAIMS(
    r"output token $t$ is the digit at position",
    after="params, record = seq2seq.load_reverse()",
)
def output_t_is_source_position_p_minus_1_minus_t(held, task):
    P = task.n
    for src, out, L in zip(held["src"], held["tgt_out"], held["lengths"], strict=True):
        assert (out[:L] == src[P - 1 - np.arange(L)]).all()
        assert src[P - 1 - L] == seq2seq.BOS and out[L] == seq2seq.EOS
        assert ((src[P - L:] >= 0) & (src[P - L:] < seq2seq.DIGITS)).all()  # BOS, then L digits


@CLAIMS(
    r"which also saved a record of the run (`record`): the task, the model's settings,",
    after="params, record = seq2seq.load_reverse()",
)
def the_record_holds_task_settings_time_and_scores(record):
    assert {"task", "model", "seconds", "held_out"} <= set(record)
    assert {"accuracy", "aligned_weight"} <= set(record["held_out"])


@CLAIMS(
    r"`lengths`, the $L$ digits of each source, and `n_src`, its real tokens with `BOS`: $L + 1$.",
    after="params, record = seq2seq.load_reverse()",
)
def n_src_counts_bos_and_lengths_does_not(held):
    np.testing.assert_array_equal(held["n_src"], held["lengths"] + 1)
    assert ((held["src"] != seq2seq.PAD).sum(1) == held["n_src"]).all()


@CLAIMS(
    r"from the others and the test set only from those.",
    after="params, record = seq2seq.load_reverse()",
)
def training_batches_never_hold_a_held_out_sequence(task):
    import inspect

    train = task.sample(np.random.default_rng(0), 4000)  # the default split, the one training draws
    assert inspect.signature(task.sample).parameters["split"].default == "train"
    P = task.n
    digits = np.array([np.pad(row[P - n:], (0, task.max_len - n))
                       for row, n in zip(train["src"], train["lengths"], strict=True)])
    assert not seq2seq._held_out(digits, train["lengths"]).any()


@CLAIMS(
    r"is the **memory** the",
    after="cache = seq2seq.encoder_cache(",
)
def the_memory_is_the_encoder_output(params, one, model_cfg, task, cache):
    memory = seq2seq.encode(params, one["src"], one["n_src"], model_cfg.n_heads)
    assert memory.shape == (1, task.n, model_cfg.d_model)
    K = memory @ params["cross.W_K"]  # (1, P, h*d_k)
    np.testing.assert_allclose(cache.K, K.reshape(1, task.n, model_cfg.n_heads, -1).transpose(0, 2, 1, 3))


@CLAIMS(
    r"their totals agree only because here $P$ equals the number of",
    after="_, _, _, counted = greedy_with(",
)
def rows_per_call_differ_and_p_equals_the_steps(counted, held, steps, task):
    B = len(held["src"])
    assert counted.counts("K")[1] // counted.counts("K")[0] == B * task.n
    assert counted.counts("Q")[1] // counted.counts("Q")[0] == B
    assert task.n == steps


@CLAIMS(
    r"a mask is True where a key is kept: position $j$ of",
    after="def cross_attention(x_t, t, memory, n_src, layer, cache):",
)
def the_padding_mask_keeps_the_last_n_src(held, task):
    from mha_core import softmax

    P = task.n
    mask = seq2seq.source_mask(held["n_src"], P)  # (B, 1, 1, P), the library's
    assert mask.shape == (len(held["src"]), 1, 1, P)
    np.testing.assert_array_equal(mask[:, 0, 0], np.arange(P) >= P - held["n_src"][:, None])
    assert (softmax(np.zeros((2, P)), mask=np.arange(P) >= P - 3)[:, : P - 3] == 0).all()  # True = kept


@CLAIMS(
    r"`merge_heads` gives $(B, 1, h \cdot d_k)$ and",
    after="def cross_attention(x_t, t, memory, n_src, layer, cache):",
)
def the_step_shapes_keep_a_query_axis_until_dropped(params, held, model_cfg, task):
    from mha_core import merge_heads

    B, h, d = 3, model_cfg.n_heads, model_cfg.d_model
    heads = np.zeros((B, h, 1, d // h))
    assert merge_heads(heads).shape == (B, 1, d)
    assert (merge_heads(heads) @ params["cross.W_O"]).shape == (B, 1, d)
    one = {k: v[:B] for k, v in held.items()}
    cache = seq2seq.encoder_cache(params, one["src"], one["n_src"], h)
    out, w = seq2seq.cross_attend(np.zeros((B, d)), cache, params, h)
    assert out.shape == (B, d) and w.shape == (B, h, task.n)  # what the step returns


@CLAIMS(
    r"(the cell below prints its value).",
    after="def cross_attention(x_t, t, memory, n_src, layer, cache):",
)
def the_tolerance_printed_is_the_checkers(CROSS_RTOL):
    assert CROSS_RTOL == cross_attention_exercises.CROSS_RTOL


@CLAIMS(
    r"query and key at the token's own position.",
    after="parts = decoder_parts(smol)",
)
def the_loop_rotates_queries_and_keys_not_values(parts, ids):
    cfg = parts.config
    p, x = parts.layers[0], parts.embed(ids)
    cache = [np.zeros((cfg["n_kv_heads"], 0, cfg["d_k"]), np.float32)] * 2
    decoder_exercises._cached_layer(x, p, cfg, cache, np.arange(len(ids)))
    from mha_core import split_heads
    from mha_core.models.blocks import rms_norm

    xn = rms_norm(x, p["attn_norm"], cfg["eps"])
    np.testing.assert_array_equal(cache[1], split_heads(xn @ p["W_V"], cfg["n_kv_heads"]))  # values unrotated
    assert not np.allclose(cache[0], split_heads(xn @ p["W_K"], cfg["n_kv_heads"]))  # keys rotated


test_quotes, test_claim = CLAIMS.tests(marks=(pytest.mark.models,))
