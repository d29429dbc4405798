"""Notebook 14 (the capstone, the model is yours): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from lesson_claims import NOTEBOOKS, Claims, outputs

from mha_core import multi_head_attention, softmax, split_heads
from mha_core.core.config import MHAConfig
from mha_core.core.counts import count_macs, count_params, kv_cache_bytes
from mha_core.teaching import capstone, decoder_exercises, exercises
from mha_core.teaching import pitfalls as pf

NB = "14_capstone.ipynb"
CLAIMS = Claims(NB)
MODELS = "from mha_core.models import load"


# ------------------------------------------------------------------ the opening


@CLAIMS(
    r"It gathers the pieces you wrote in notebooks 01, 02, 07 and 13 into one model that writes",
    after=MODELS,
)
def the_pieces_are_the_exercises_of_01_02_07_and_13():
    def code(name):
        cells = json.loads(Path(name).read_text())["cells"]
        return " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")

    assert "check_attention(" in code("01_one_head.ipynb")
    assert "check_split_heads(" in code("02_shape_round_trip.ipynb")
    assert "check_merge_heads(" in code("07_pitfalls.ipynb")
    nb13 = code("13_a_model_that_writes.ipynb")
    assert "check_decoder_layer(decoder_layer)" in nb13
    assert "check_generation_loop(generate)" in nb13


@CLAIMS(r"Needs `make models`.", after=MODELS)
def the_model_is_the_cached_smollm2(smol):
    assert smol.name == "smollm2"


@CLAIMS(
    r"the bytes of its cache of keys and values, and how much faster that cache makes it, measured here",
    after="timing = time_the_cache(",
)
def the_four_numbers_are_computed(numbers, timing):
    assert numbers.counted > 0 and numbers.macs_per_token["total"] > 0 and numbers.kv_bytes > 0
    assert isinstance(timing, capstone.CacheTiming)
    assert timing.verdict


@CLAIMS(r"answer the same four questions by hand for three other models", after='check_answer("params_768_12"')
def four_questions_on_three_models():
    ids = ("params_768_12", "d_k_768_12", "attention_macs_512_8_2000", "kv_cache_gqa_mib")
    assert set(ids) <= set(exercises.QUESTIONS)
    shapes = {(768, 12), (512, 8), (exercises._GQA["d_model"], exercises._GQA["h"])}
    assert len(shapes) == 3


# ------------------------------------------------------------------ 1 · multi-head attention


@CLAIMS(r"Here you may call `softmax` of `mha_core`, and nothing else of it.", after="def my_multi_head_attention")
def only_softmax_may_be_called():
    def with_softmax(x, params, n_heads):
        *lead, n, d = x.shape
        q, k, v = (np.swapaxes((x @ params[w]).reshape(*lead, n, n_heads, d // n_heads), -3, -2)
                   for w in ("W_Q", "W_K", "W_V"))  # (..., h, N, d_k)
        w = softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(d // n_heads), axis=-1)  # (..., h, N, N)
        return np.swapaxes(w @ v, -3, -2).reshape(*lead, n, d) @ params["W_O"]  # (..., N, d_model)

    def with_split_heads(x, params, n_heads):
        q, k, v = (split_heads(x @ params[w], n_heads) for w in ("W_Q", "W_K", "W_V"))
        w = softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), axis=-1)
        return np.swapaxes(w @ v, -3, -2).reshape(x.shape) @ params["W_O"]

    assert exercises.check_multi_head_attention(with_softmax).ok
    assert not exercises.check_multi_head_attention(with_split_heads).ok
    assert not exercises.check_multi_head_attention(multi_head_attention).ok


@CLAIMS(
    r"The checker runs your layer with and without a batch axis and recognises a forgotten $W_O$, a split "
    r"without the transpose, and a wrong scale or softmax axis inside the layer.",
    after="def my_multi_head_attention",
)
def the_layer_checker_names_its_mistakes():
    def without_w_o(x, params, n_heads):
        *lead, n, d = x.shape
        q, k, v = (np.swapaxes((x @ params[w]).reshape(*lead, n, n_heads, d // n_heads), -3, -2)
                   for w in ("W_Q", "W_K", "W_V"))
        w = softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(d // n_heads), axis=-1)
        return np.swapaxes(w @ v, -3, -2).reshape(*lead, n, d)  # W_O forgotten

    def only_2d(x, params, n_heads):
        if x.ndim != 2:
            raise ValueError("only (N, d_model)")
        return without_w_o(x, params, n_heads) @ params["W_O"]

    assert exercises.check_multi_head_attention(without_w_o).pitfall == "no_output_projection"
    assert exercises.check_multi_head_attention(pf.multi_head_attention_without_transpose).pitfall == \
        "layer_without_transpose"
    assert "(B, N, d_model)" in exercises.check_multi_head_attention(only_2d).message

    def inside(axis, width):  # a right layer but for the softmax axis or the width under the square root
        def mha(x, params, n_heads):
            *lead, n, d = x.shape
            q, k, v = (np.swapaxes((x @ params[w]).reshape(*lead, n, n_heads, d // n_heads), -3, -2)
                       for w in ("W_Q", "W_K", "W_V"))
            w = softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(width(d, n_heads)), axis=axis)
            return np.swapaxes(w @ v, -3, -2).reshape(*lead, n, d) @ params["W_O"]
        return mha

    assert exercises.check_multi_head_attention(inside(-2, lambda d, h: d // h)).pitfall == \
        "attention_softmax_over_queries"
    assert exercises.check_multi_head_attention(inside(-1, lambda d, h: d)).pitfall == "scale_sqrt_d_model"


# ------------------------------------------------------------------ 2 · the decoder layer


@CLAIMS(
    r"With the defaults it is 13's layer, and the checker is 13's: layer 3 of SmolLM2, with its classic "
    r"mistakes named.",
    after="def decoder_layer(x, p, config, cache=None, start=0)",
)
def the_checker_is_13s_on_layer_3():
    assert decoder_exercises.DECODER_LAYER == 3
    assert len(decoder_exercises.DECODER_MISTAKES) >= 5
    nb13 = json.loads(Path("13_a_model_that_writes.ipynb").read_text())
    imports = "".join(nb13["cells"][1]["source"])
    assert "from mha_core.teaching.decoder_exercises import" in imports and "check_decoder_layer" in imports


@CLAIMS(
    r"The attention inside it is section 1's with three changes: RoPE turns the queries and the keys, each "
    r"key/value head serves $h / n_{kv}$ query heads, and the causal mask hides the later tokens.",
    after="def decoder_layer(x, p, config, cache=None, start=0)",
)
def the_layer_is_mha_with_rope_gqa_and_the_mask(smol):
    from mha_core.teaching.source import source

    text = source(type(smol).layer)
    assert "multi_head_attention(" in text
    assert "n_kv_heads" in text
    assert "causal=True" in text
    assert "rope_base" in text


# ------------------------------------------------------------------ 3 · the model writes


@CLAIMS(r"(the default is the one 13 checks)", after="def generate(ids, n_new, parts)")
def the_default_prompt_is_13s(PROMPT):
    assert PROMPT == decoder_exercises.GEN_PROMPT


@CLAIMS(r"`N_NEW` to the number of tokens to write, at most 32.", after="def generate(ids, n_new, parts)")
def at_most_32_new_tokens(generate, PROMPT, N_NEW):
    import pytest

    assert decoder_exercises.MAX_NEW == 32
    assert 1 <= N_NEW <= 32
    with pytest.raises(ValueError, match="max_new_tokens"):
        decoder_exercises.check_generation_loop(generate, prompt=PROMPT, max_new_tokens=33)


@CLAIMS(
    r"The checker runs SmolLM2's own `write` on your prompt and compares its tokens with yours, one by one.",
    after="def generate(ids, n_new, parts)",
)
def the_loop_checker_compares_the_tokens(smol):
    want = [s.id for s in smol.write(smol.encode("Once upon a time"), 2)]

    def second_token_wrong(ids, n_new, parts):
        parts.head(parts.embed(ids))
        return [want[0], (want[1] + 1) % smol.vocab_size]

    fb = decoder_exercises.check_generation_loop(second_token_wrong, prompt="Once upon a time", max_new_tokens=2)
    assert not fb.ok
    assert "Token 2 of 2 differs" in fb.message


# ------------------------------------------------------------------ 4 · four numbers


@CLAIMS(
    r"Your model runs SmolLM2's weights, so its size and its cost are those of SmolLM2's arrays.",
    after="numbers = model_numbers(",
)
def the_parts_are_smollm2s_arrays(parts, smol):
    assert len(parts.layers) == smol.n_layers
    for i in (0, smol.n_layers - 1):
        for name, w in parts.layers[i].items():
            assert np.array_equal(w, smol.arrays[f"layer{i}.{name}"])


@CLAIMS(
    r"counts them with the formulas of notebooks 03, 05 and 06 (`count_params`, `count_macs` and "
    r"`kv_cache_bytes` of `mha_core.core.counts`)",
    after="numbers = model_numbers(",
)
def the_counts_are_the_librarys(numbers, smol):
    cfg = MHAConfig(smol.d_model, smol.n_heads, n_kv_heads=smol.n_kv_heads)
    L, n = smol.n_layers, numbers.n_tokens
    assert numbers.params["attention"] == count_params(cfg)["total"] * L
    assert numbers.macs_per_token["projections"] == count_macs(cfg, 1)["projections"] * L
    assert numbers.macs_per_token["attention"] == count_macs(cfg, 1, n_k=n)["attention"] * L
    assert numbers.kv_bytes == kv_cache_bytes(cfg, n, n_layers=L, dtype=np.float32)


@CLAIMS(
    r"That step runs the longest text: the prompt and every new token but the last, which is written and never run.",
    after="numbers = model_numbers(",
)
def the_last_step_runs_all_but_the_last_token(numbers, ids, N_NEW, smol):
    record = decoder_exercises._Record()
    parts = decoder_exercises._parts(smol, record)
    decoder_exercises._loop(parts, ids, N_NEW)  # the checker's own loop with a cache
    assert record.embedded == numbers.n_tokens  # every token ever run
    assert numbers.n_tokens == ids.size + N_NEW - 1


@CLAIMS(
    r"One step runs one new row through every layer (its query, key, value and output projections, its query "
    r"against every key in the cache, the feed-forward), then the **head**: the final norm and the product with "
    r"the embedding table that gives one score per token of the vocabulary.",
    after="numbers = model_numbers(",
)
def the_head_is_the_tied_embedding(parts, smol, numbers):
    assert "lm_head" not in smol.arrays  # the head reuses the embedding table
    x = parts.embed([1, 2])  # (2, d_model)
    assert parts.head(x).shape == (2, smol.vocab_size)
    assert numbers.macs_per_token["head"] == smol.arrays["tok_embed"].size


@CLAIMS(r"in float32 (4 bytes a number)", after="numbers = model_numbers(")
def the_cache_is_float32(numbers, smol, parts):
    assert parts.layers[0]["W_K"].dtype == np.float32  # so the keys and values are float32 too
    assert numbers.kv_bytes == smol.n_layers * numbers.n_tokens * 2 * smol.n_kv_heads * smol.d_k * 4


@CLAIMS(
    r"next to what they would be if every query head kept its own (plain MHA)",
    after="numbers = model_numbers(",
)
def plain_mha_caches_every_head(numbers, smol):
    assert numbers.kv_bytes_mha * smol.n_kv_heads == numbers.kv_bytes * smol.n_heads


@CLAIMS(
    r"Only the scores and the weighted sums grow with the length of the text; the other parts cost the same at "
    r"every step.",
    after="numbers = model_numbers(",
)
def only_the_attention_core_grows(smol, numbers):
    longer = capstone.model_numbers(smol, 2 * numbers.n_tokens).macs_per_token
    grows = {k for k, v in longer.items() if v != numbers.macs_per_token[k]}
    assert grows == {"attention", "total"}
    assert longer["attention"] == 2 * numbers.macs_per_token["attention"]


@CLAIMS(r"Those other parts use each weight once per step, so their MACs equal the parameters without the norms.",
        after="numbers = model_numbers(")
def one_mac_per_weight(numbers):
    m, p = numbers.macs_per_token, numbers.params
    assert m["projections"] + m["ffn"] + m["head"] == p["total"] - p["norms"]


@CLAIMS(r"The feed-forward holds most of the parameters.", after="numbers = model_numbers(")
def the_ffn_holds_most(numbers):
    assert numbers.params["ffn"] > numbers.params["total"] / 2


@CLAIMS(r"in turns, three times each, in this run", after="timing = time_the_cache(")
def three_runs_each_in_turns(parts):
    assert capstone.ROUNDS == 3
    seen = []

    def cached(ids, n_new, parts):
        seen.append("cached")
        return capstone.recompute_loop(lambda x, p, c: x, ids, n_new, parts)

    t = capstone.time_the_cache(cached, lambda x, p, c: (seen.append("layer"), x)[1], np.array([1, 2]), 1, parts)
    order = [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]  # runs, each layer call folded
    assert order == ["cached", "layer"] * 3
    assert len(t.cached) == len(t.recomputed) == 3


@CLAIMS(
    r"It names the faster side only when every run of one side beat every run of the other, and otherwise says "
    r"that the two cannot be told apart.",
    after="timing = time_the_cache(",
)
def the_verdict_needs_runs_that_do_not_overlap():
    assert capstone._verdict([1.0, 1.2], [2.0, 2.5], True).startswith("the cache is faster")
    assert capstone._verdict([2.0, 2.5], [1.0, 1.2], True).startswith("the cache is slower")
    assert "cannot be told apart" in capstone._verdict([1.0, 2.1], [2.0, 2.5], True)


def test_the_printed_verdict_is_the_computed_one():
    """"read the verdict the cell prints": the cell prints timing.verdict and no typed number."""
    out = outputs(NB, "timing = time_the_cache(")
    assert out.startswith("verdict: not measured yet") or re.search(r"^verdict: the ", out, re.M)
    prose = " ".join("".join(c["source"]) for c in json.loads((NOTEBOOKS / NB).read_text())["cells"]
                     if c["cell_type"] == "markdown")
    assert not re.search(r"\d(\.\d+)?\s*(x|×|times) (faster|slower)", prose)


# ------------------------------------------------------------------ 5 · by hand


@CLAIMS(r"The checker recognises the usual wrong answers and says what they forgot.", after='check_answer("params_768_12"')
def the_questions_name_the_usual_slips():
    fb = exercises.check_answer("params_768_12", 12 * 4 * 768 * 768)
    assert not fb.ok and "number of heads" in fb.message
    fb = exercises.check_answer("kv_cache_gqa_mib", exercises._gqa_cache_mib(exercises._GQA["h"]))
    assert not fb.ok and "plain MHA" in fb.message


@CLAIMS(
    r"the GQA question's layout is that of Llama 2 70B (Touvron et al. 2023)",
    after='check_answer("kv_cache_gqa_mib"',
)
def the_gqa_question_is_llama_2_70b():
    g = exercises._GQA  # Llama 2 70B (Touvron et al. 2023, table 1 and the released config): 8192 wide, 80 layers
    assert (g["d_model"], g["h"], g["n_kv"], g["layers"]) == (8192, 64, 8, 80)


# ------------------------------------------------------------------ the recap


@CLAIMS('The checker says "correct" only when it writes SmolLM2\'s own tokens.', after="def generate(ids, n_new, parts)")
def correct_needs_the_models_tokens(smol):
    def first_token_wrong(ids, n_new, parts):
        parts.head(parts.embed(ids))
        return [0] * n_new

    assert [s.id for s in smol.write(smol.encode("Once upon a time"), 1)] != [0]
    assert not decoder_exercises.check_generation_loop(first_token_wrong, prompt="Once upon a time",
                                                       max_new_tokens=1).ok


@CLAIMS(r"Its parameters, counted in its arrays, agree with the formulas.", after="numbers = model_numbers(")
def the_counted_parameters_agree(numbers):
    assert numbers.counted == numbers.params["total"]


@CLAIMS(
    r"Per new token, only the attention core grows with the text, and plain MHA's cache would be $h / n_{kv}$ "
    r"times as large.",
    after="numbers = model_numbers(",
)
def the_cache_is_h_over_n_kv_smaller(numbers, smol):
    assert numbers.kv_bytes_mha / numbers.kv_bytes == smol.n_heads / smol.n_kv_heads
    assert capstone.model_numbers(smol, numbers.n_tokens + 1).macs_per_token["ffn"] == numbers.macs_per_token["ffn"]


@CLAIMS(
    r"The speed-up of the cache is measured, both sides in turns in the same run, and read from the verdict.",
    after="timing = time_the_cache(",
)
def the_speedup_comes_from_the_runs():
    t = capstone.CacheTiming((1.0, 1.1), (3.0, 2.0), True, "")
    assert t.speedup == 2.0  # best recomputed over best cached
    assert capstone.CacheTiming((), (), False, "").speedup is None


@CLAIMS(
    r"By hand: the weights of one attention layer are $4\,d_{model}^2$ whatever $h$ is; its attention core costs "
    r"$2N^2 d_{model}$ MACs whatever $h$ is; its cache grows with the key/value heads $n_{kv}$, not with the "
    r"query heads $h$, at a fixed head width $d_k$.",
    after='check_answer("kv_cache_gqa_mib"',
)
def the_hand_formulas():
    for h in (1, 2, 4, 8):
        cfg = MHAConfig(512, h)
        assert count_params(cfg)["total"] == 4 * 512**2
        assert count_macs(cfg, 100)["attention"] == 2 * 100**2 * 512
    assert kv_cache_bytes(MHAConfig(512, 8, n_kv_heads=2), 10) == kv_cache_bytes(MHAConfig(1024, 16, n_kv_heads=2), 10)
    assert kv_cache_bytes(MHAConfig(512, 8, n_kv_heads=4), 10) == 2 * kv_cache_bytes(MHAConfig(512, 8, n_kv_heads=2), 10)


test_quotes, test_claim = CLAIMS.tests()
