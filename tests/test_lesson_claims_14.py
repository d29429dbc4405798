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
NUMBERS = "numbers, longer = model_numbers("
RUN = "tokens = written("


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


@CLAIMS(r"count three numbers of that model yourself, from your own pieces", after=RUN)
def three_counts_are_the_students_stubs():
    cells = json.loads(Path(NB).read_text())["cells"]
    code = [("".join(c["source"])) for c in cells if c["cell_type"] == "code"]
    for name, check in (("my_param_count", "check_param_count"), ("my_macs_per_token", "check_macs_per_token"),
                        ("my_kv_bytes", "check_kv_bytes")):
        cell = next(c for c in code if f"def {name}(" in c)
        assert 'raise NotImplementedError("your code here")' in cell
        assert f"{check}({name}," in cell


@CLAIMS(r"then measure a fourth, how much faster that cache makes it", after="timing = time_the_cache(")
def the_fourth_is_measured(timing):
    assert isinstance(timing, capstone.CacheTiming)
    assert timing.verdict


@CLAIMS(r"answer four questions by hand about three other models", after='check_answer("params_768_12"')
def four_questions_on_three_models():
    ids = ("params_768_12", "d_k_768_12", "attention_macs_512_8_2000", "kv_cache_gqa_mib")
    assert set(ids) <= set(exercises.QUESTIONS)
    shapes = {(768, 12), (512, 8), (exercises._GQA["d_model"], exercises._GQA["h"])}
    assert len(shapes) == 3


# ------------------------------------------------------------------ 1 · multi-head attention


@CLAIMS(r"Here you may call `softmax` of `mha_core`, and nothing else of it", after="def my_multi_head_attention")
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
    r"paste your own `attention` (notebook 01), `split_heads` (02) and `merge_heads` (07) into this cell, or "
    r"write them inside the layer. The imports of the first cell are for section 2.",
    after="def my_multi_head_attention",
)
def the_imports_are_for_the_decoder_layer():
    from mha_core.teaching.diagnosis import core_functions

    nb = json.loads(Path(NB).read_text())
    imports = "".join(nb["cells"][1]["source"])
    assert "split_heads" in imports and "merge_heads" in imports and "for section 2" in imports
    allowed = set(core_functions().values()) - set(decoder_exercises._WHOLE_LAYERS)
    assert {"split_heads", "merge_heads", "apply_rope", "causal_mask", "softmax"} <= allowed
    for name in ("attention", "split_heads", "merge_heads"):  # the exercises of 01, 02 and 07
        assert hasattr(exercises, f"check_{name}")


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
    r"The attention inside it is section 1's, rewritten with three changes: RoPE turns the queries and the keys, each "
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


@CLAIMS(
    r"The layer returns only its output, so it fills the dict it is given: `None` means a fresh dict that nobody "
    r"keeps (13's layer, all rows at once)",
    after="def decoder_layer(x, p, config, cache=None, start=0)",
)
def the_checker_calls_the_layer_with_its_defaults():
    import inspect

    seen = []

    def layer(*args):
        seen.append(len(args))
        return args[0]

    decoder_exercises.check_decoder_layer(layer)
    assert seen and set(seen) == {3}  # x, p, config: the cache and start keep their defaults
    nb = json.loads(Path(NB).read_text())
    stub = next("".join(c["source"]) for c in nb["cells"] if "def decoder_layer(" in "".join(c["source"]))
    ns = {}
    exec(stub.split("check_decoder_layer")[0], ns)  # the stub's def alone
    params = inspect.signature(ns["decoder_layer"]).parameters
    assert params["cache"].default is None and params["start"].default == 0


@CLAIMS(
    r"For $M$ new rows at positions `start`, ..., `start + M - 1`, rotate with "
    r"`apply_rope(q, np.arange(start, start + M), base)` (`q` of shape $(h, M, d_k)$, the keys alike), and once "
    r"the new keys are in the cache, which then holds $T$ of them, mask with `causal_mask(M, T)`, of shape "
    r"$(M, T)$: its last row sees every key.",
    after="def decoder_layer(x, p, config, cache=None, start=0)",
)
def rope_and_mask_for_new_rows(smol):
    from mha_core import apply_rope, causal_mask

    q = np.random.default_rng(0).normal(size=(smol.n_heads, 7, smol.d_k))  # (h, T, d_k)
    whole = apply_rope(q, np.arange(7), smol.rope_base)
    start, m = 4, 3
    assert np.allclose(apply_rope(q[:, start:], np.arange(start, start + m), smol.rope_base), whole[:, start:])
    mask = causal_mask(m, 7)
    assert mask.shape == (m, 7)
    assert mask[-1].all()
    assert np.array_equal(mask, np.tri(7, dtype=bool)[start:])  # the rows of the full triangle


# ------------------------------------------------------------------ 3 · the model writes


@CLAIMS(
    r"give it a fourth argument, `caches`: the list of dicts, one per layer, that your layers fill",
    after="def generate(ids, n_new, parts, caches=None)",
)
def written_passes_the_caches(parts, smol):
    seen = []

    def loop(ids, n_new, parts, caches):
        seen.append(caches)
        caches[0]["k"] = np.zeros((1, 2, 3), np.float32)
        return [5] * n_new

    caches = [{} for _ in parts.layers]
    assert capstone.written(loop, smol.encode("Hi"), 2, parts, caches) == [5, 5]
    assert seen == [caches] and capstone.cache_nbytes(caches) == 24


@CLAIMS(
    r"It refuses the library's cached step (`prefill`, `decode_step`): the loop runs your layer.",
    after="def generate(ids, n_new, parts, caches=None)",
)
def the_library_step_is_refused(smol):
    def the_models_own(ids, n_new, parts, caches=None):
        parts.head(parts.embed(ids))
        return [s.id for s in smol.write(ids, n_new)]  # SmolLM2's write: prefill, then decode_step

    fb = decoder_exercises.check_generation_loop(the_models_own, prompt="Once upon a time", max_new_tokens=2,
                                                 refuse=("prefill", "decode_step"))
    assert not fb.ok and fb.pitfall == "library_step"
    assert "prefill" in fb.message
    assert decoder_exercises.check_generation_loop(the_models_own, prompt="Once upon a time",
                                                   max_new_tokens=2).pitfall != "library_step"  # 13's check


@CLAIMS(r"(the default is the one 13 checks)", after="def generate(ids, n_new, parts, caches=None)")
def the_default_prompt_is_13s(PROMPT):
    assert PROMPT == decoder_exercises.GEN_PROMPT


@CLAIMS(r"`N_NEW` to the number of tokens to write, at most 32.", after="def generate(ids, n_new, parts, caches=None)")
def at_most_32_new_tokens(generate, PROMPT, N_NEW):
    import pytest

    assert decoder_exercises.MAX_NEW == 32
    assert 1 <= N_NEW <= 32
    with pytest.raises(ValueError, match="max_new_tokens"):
        decoder_exercises.check_generation_loop(generate, prompt=PROMPT, max_new_tokens=33)


@CLAIMS(
    r"The checker runs SmolLM2's own `write` on your prompt and compares its tokens with yours, one by one.",
    after="def generate(ids, n_new, parts, caches=None)",
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
    after=RUN,
)
def the_parts_are_smollm2s_arrays(parts, smol):
    assert len(parts.layers) == smol.n_layers
    for i in (0, smol.n_layers - 1):
        for name, w in parts.layers[i].items():
            assert np.array_equal(w, smol.arrays[f"layer{i}.{name}"])


@CLAIMS(
    r"counts the same with the formulas of notebooks 03, 05 and 06 (`count_params`, `count_macs` and "
    r"`kv_cache_bytes` of `mha_core.core.counts`), part by part",
    after=NUMBERS,
)
def the_counts_are_the_librarys(numbers, smol):
    cfg = MHAConfig(smol.d_model, smol.n_heads, n_kv_heads=smol.n_kv_heads)
    L, n = smol.n_layers, numbers.n_tokens
    assert numbers.params["attention"] == count_params(cfg)["total"] * L
    assert numbers.macs_per_token["projections"] == count_macs(cfg, 1)["projections"] * L
    assert numbers.macs_per_token["attention"] == count_macs(cfg, 1, n_k=n)["attention"] * L
    assert numbers.kv_bytes == kv_cache_bytes(cfg, n, n_layers=L, dtype=np.float32)


@CLAIMS(
    r"The checker of section 3 stops where the model writes its end-of-text token, so the length is the one "
    r"your `generate` returned (`N_NEW` until it is written)",
    after=RUN,
)
def the_length_is_what_generate_returned(smol, tokens, n_tokens, ids, N_NEW):
    from mha_core.teaching.source import source

    assert "eos_ids" in source(type(smol)._cached)  # write stops at the end-of-text token
    assert n_tokens == ids.size + (len(tokens) or N_NEW) - 1


@CLAIMS(
    r"`n_tokens` is the text of its last step, the prompt and every new token but the last, which is written and "
    r"never run.",
    after=RUN,
)
def the_last_step_runs_all_but_the_last_token(n_tokens, ids, tokens, N_NEW, smol):
    record = decoder_exercises._Record()
    parts = decoder_exercises._parts(smol, record)
    decoder_exercises._loop(parts, ids, len(tokens) or N_NEW)  # the checker's own loop with a cache
    assert record.embedded == n_tokens  # every token ever run


@CLAIMS(
    r"Write `my_param_count(layers, vocab, d_model)`: the sizes of the arrays your layer reads (`layers` is "
    r"`parts.layers`, one dict per layer), the embedding table of `vocab` x `d_model`, and the final norm before "
    r"the output head, `d_model` numbers.",
    after="def my_param_count(",
)
def the_parameters_are_those_three(parts, smol):
    vocab, d = smol.arrays["tok_embed"].shape
    total = sum(a.size for p in parts.layers for a in p.values()) + vocab * d + d
    assert total == sum(a.size for a in smol.arrays.values())
    assert capstone.check_param_count(lambda layers, v, dm: total, smol).ok
    assert not capstone.check_param_count(lambda layers, v, dm: total - 1, smol).ok


@CLAIMS(
    r"The output head (the unembedding, which turns the last row into one score per token of the vocabulary) is "
    r"the embedding table itself, tied to it: count it once.",
    after="def my_param_count(",
)
def the_head_is_the_tied_embedding(parts, smol):
    assert "lm_head" not in smol.arrays  # the head reuses the embedding table
    x = parts.embed([1, 2])  # (2, d_model)
    assert parts.head(x).shape == (2, smol.vocab_size)
    total = capstone.model_numbers(smol, 1).params["total"]
    twice = total + smol.arrays["tok_embed"].size
    assert capstone.check_param_count(lambda layers, v, dm: twice, smol).pitfall == "head_counted_twice"


@CLAIMS(
    r"The file stores the weights in 4 bits, but `load` unpacks them into float32 arrays, the ones your layer "
    r"multiplies; the cell above printed their bytes.",
    after="def my_param_count(",
)
def the_weights_are_unpacked_to_float32(smol, weights, parts):
    assert "4-bit" in str(smol)
    assert {a.dtype for a in smol.arrays.values()} == {np.dtype(np.float32)}
    assert parts.layers[0]["W_Q"].dtype == np.float32
    assert weights == 4 * sum(a.size for a in smol.arrays.values())


@CLAIMS(
    r"the products with $W_Q$, $W_K$, $W_V$, $W_O$ and the three feed-forward matrices cost one MAC per weight, "
    r"since a $(1, a)$ row times an $(a, b)$ matrix is $a\,b$ MACs",
    after="def my_macs_per_token(",
)
def one_mac_per_weight_of_the_row(parts, smol):
    p = parts.layers[0]
    cfg = MHAConfig(smol.d_model, smol.n_heads, n_kv_heads=smol.n_kv_heads)
    assert count_macs(cfg, 1)["projections"] == sum(p[w].size for w in ("W_Q", "W_K", "W_V", "W_O"))
    m = capstone.model_numbers(smol, 3).macs_per_token
    assert m["ffn"] == smol.n_layers * sum(p[w].size for w in ("W_gate", "W_up", "W_down"))


@CLAIMS(
    r"its query against the cache costs $T\,d_k$ for the scores and as much for the weighted sum of V, in each "
    r"of the $h$ query heads (notebooks 03 and 05). Then the output head: $d_{model}$ x vocab.",
    after="def my_macs_per_token(",
)
def the_cached_step_reads_t_keys(smol):
    cfg = MHAConfig(smol.d_model, smol.n_heads, n_kv_heads=smol.n_kv_heads)
    c = count_macs(cfg, 1, n_k=17)
    assert c["scores"] == c["attention"] - c["scores"] == smol.n_heads * 17 * smol.d_k
    assert capstone.model_numbers(smol, 17).macs_per_token["head"] == smol.d_model * smol.vocab_size


@CLAIMS(r"The checker tries $T$ = `n_tokens` and twice that.", after="def my_macs_per_token(")
def the_mac_checker_tries_two_lengths(smol, n_tokens):
    right = capstone.model_numbers(smol, n_tokens).macs_per_token["total"]
    assert not capstone.check_macs_per_token(lambda t, layers, cfg, vocab: right, smol, n_tokens).ok

    def all_rows(t, layers, cfg, vocab):
        m = capstone.model_numbers(smol, t).macs_per_token
        return m["total"] - m["attention"] + t * m["attention"]

    assert capstone.check_macs_per_token(all_rows, smol, n_tokens).pitfall == "attention_over_all_rows"


@CLAIMS(
    r"Write `my_kv_bytes(caches)`: the bytes of the keys and values your loop kept, the `nbytes` of the arrays in "
    r"`caches`. The checker compares your count with the arrays first, then with `model_numbers`: $n_{kv}$ heads "
    r"of float32 (4 bytes a number).",
    after="def my_kv_bytes(",
)
def the_cache_checker_reads_the_arrays(smol, n_tokens):
    def caches(heads, dtype=np.float32):
        shape = (heads, n_tokens, smol.d_k)  # (n_kv, T, d_k)
        return [{"k": np.zeros(shape, dtype), "v": np.zeros(shape, dtype)} for _ in range(smol.n_layers)]

    def count(c):
        return sum(a.nbytes for cache in c for a in cache.values())

    assert capstone.check_kv_bytes(count, caches(smol.n_kv_heads), smol, n_tokens).ok
    assert capstone.check_kv_bytes(lambda c: count(c) // 2, caches(smol.n_kv_heads), smol, n_tokens).pitfall == \
        "keys_only"
    assert capstone.check_kv_bytes(count, caches(smol.n_kv_heads, np.float64), smol, n_tokens).pitfall == \
        "float64_cache"
    assert capstone.model_numbers(smol, n_tokens).kv_bytes == count(caches(smol.n_kv_heads))


@CLAIMS(
    r"A loop that caches the keys after `np.repeat` keeps $h / n_{kv}$ times as many bytes, and the checker says so.",
    after="def my_kv_bytes(",
)
def caching_after_repeat_is_named(smol, n_tokens):
    shape = (smol.n_heads, n_tokens, smol.d_k)  # (h, T, d_k): repeated before caching
    repeated = [{"k": np.zeros(shape, np.float32), "v": np.zeros(shape, np.float32)} for _ in range(smol.n_layers)]
    fb = capstone.check_kv_bytes(capstone.cache_nbytes, repeated, smol, n_tokens)
    assert fb.pitfall == "cache_after_repeat"
    assert capstone.cache_nbytes(repeated) == capstone.model_numbers(smol, n_tokens).kv_bytes * smol.n_heads // \
        smol.n_kv_heads


@CLAIMS(
    r"the output head (unembedding) is tied to the embedding, so it is counted once, in the parameters.",
    after=NUMBERS,
)
def the_head_is_counted_once(numbers, smol):
    assert "head" not in numbers.params
    assert numbers.params["embedding"] == smol.arrays["tok_embed"].size
    assert numbers.macs_per_token["head"] == smol.arrays["tok_embed"].size  # but run at every step


@CLAIMS(r"The second line of MACs is the same step at twice the length.", after=NUMBERS)
def the_second_line_is_twice_as_long(numbers, longer):
    assert longer.n_tokens == 2 * numbers.n_tokens


def test_the_mac_lines_are_printed_at_two_lengths():
    out = outputs(NB, NUMBERS)
    assert len(re.findall(r"^MACs of one step, token \d+ of the text", out, re.M)) == 2


@CLAIMS(
    r"Between the two lines of MACs, only the scores and the weighted sums grow with the length of the text; the "
    r"other parts cost the same at every step.",
    after=NUMBERS,
)
def only_the_attention_core_grows(longer, numbers):
    longer = longer.macs_per_token
    grows = {k for k, v in longer.items() if v != numbers.macs_per_token[k]}
    assert grows == {"attention", "total"}
    assert longer["attention"] == 2 * numbers.macs_per_token["attention"]


@CLAIMS(r"Those other parts use each weight once per step, so their MACs equal the parameters without the norms.",
        after=NUMBERS)
def one_mac_per_weight(numbers):
    m, p = numbers.macs_per_token, numbers.params
    assert m["projections"] + m["ffn"] + m["head"] == p["total"] - p["norms"]


@CLAIMS(r"The feed-forward holds most of the parameters.", after=NUMBERS)
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


@CLAIMS(
    r"how many weights one multi-head attention layer holds at $d_{model} = 768$, $h = 12$, without biases",
    after='check_answer("params_768_12"',
)
def question_1_is_the_weights():
    assert "d_model = 768 and h = 12" in exercises.QUESTIONS["params_768_12"].prompt
    assert "without biases" in exercises.QUESTIONS["params_768_12"].prompt


@CLAIMS(r"the width $d_k$ of one head at the same shape", after='check_answer("d_k_768_12"')
def question_2_is_d_k():
    assert "d_model = 768 and h = 12" in exercises.QUESTIONS["d_k_768_12"].prompt


@CLAIMS(
    r"how many MACs the scores and the weighted sum take together, over all heads, in the worked example of "
    r"notebook 03 ($d_{model} = 512$, $h = 8$) at $N = 2000$ tokens, the whole text at once",
    after='check_answer("attention_macs_512_8_2000"',
)
def question_3_is_the_worked_example():
    q = exercises.QUESTIONS["attention_macs_512_8_2000"]
    assert "d_model = 512, h = 8" in q.prompt and "N = 2,000" in q.prompt
    assert q.answer() == count_macs(MHAConfig(512, 8), 2000)["attention"]
    nb03 = json.loads(Path("03_worked_example.ipynb").read_text())
    assert any("MHAConfig(d_model=512, n_heads=8)" in "".join(c["source"]) for c in nb03["cells"])


@CLAIMS(
    r"how many MiB the KV cache of a GQA model takes ($d_{model} = 8192$, $h = 64$, $n_{kv} = 8$, 80 layers) for "
    r"one sequence of 4096 tokens in fp16 (2 bytes a number)",
    after='check_answer("kv_cache_gqa_mib"',
)
def question_4_is_the_gqa_cache():
    g = exercises._GQA
    assert (g["d_model"], g["h"], g["n_kv"], g["layers"], g["tokens"]) == (8192, 64, 8, 80, 4096)
    assert "fp16 (2 bytes a number)" in exercises.QUESTIONS["kv_cache_gqa_mib"].prompt


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


@CLAIMS('The checker says "correct" only when it writes SmolLM2\'s own tokens.', after="def generate(ids, n_new, parts, caches=None)")
def correct_needs_the_models_tokens(smol):
    def first_token_wrong(ids, n_new, parts):
        parts.head(parts.embed(ids))
        return [0] * n_new

    assert [s.id for s in smol.write(smol.encode("Once upon a time"), 1)] != [0]
    assert not decoder_exercises.check_generation_loop(first_token_wrong, prompt="Once upon a time",
                                                       max_new_tokens=1).ok


@CLAIMS(
    r"You counted its parameters, its MACs per token and its cache's bytes from your own pieces, and they agree "
    r"with the formulas.",
    after=NUMBERS,
)
def the_counted_parameters_agree(numbers, smol, parts):
    assert numbers.counted == numbers.params["total"]
    for check in ("check_param_count", "check_macs_per_token", "check_kv_bytes"):
        assert "model_numbers(" in __import__("inspect").getsource(getattr(capstone, check))


@CLAIMS(
    r"Your model is your pieces: section 1's attention, rewritten for GQA in your decoder layer with RoPE, shared "
    r"key/value heads and the causal mask (section 2), run over every layer by a greedy loop that keeps each "
    r"layer's keys and values (section 3).",
    after="def generate(ids, n_new, parts, caches=None)",
)
def the_loop_runs_the_students_layer():
    nb = json.loads(Path(NB).read_text())
    code = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert 'refuse=("prefill", "decode_step")' in code
    assert "multi_head_attention" in decoder_exercises._WHOLE_LAYERS  # the layer writes its attention


@CLAIMS(
    r"Per new token, only the attention core grows with the text, and plain MHA's cache would be $h / n_{kv}$ "
    r"times as large.",
    after=NUMBERS,
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
    r"By hand, for other models: the weights of one attention layer are $4\,d_{model}^2$ whatever $h$ is; its attention core costs "
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
