"""The decoder checkers (mha_core.teaching.decoder_exercises) on SmolLM2's real weights: a layer and
a greedy loop written from the definitions (tests/decoder_solutions.py, plain NumPy) pass, each
classic mistake is named, a blank stub is "not attempted", a crash is a message, bad arguments
fail at the door; and the independent loop writes SmolLM2's greedy tokens."""

from __future__ import annotations

import re

import decoder_solutions as solution
import numpy as np
import pytest

from mha_core import decode_step, init_kv_cache, multi_head_attention, prefill
from mha_core.teaching.decoder_exercises import (
    DECODER_MISTAKES,
    LOOP_MISTAKES,
    check_decoder_layer,
    check_generation_loop,
    decoder_parts,
    layer_config,
    layer_weights,
)

THREE_PROMPTS = ("The capital of France is", "def fibonacci(n):", "Once upon a time")


def stub(*args):
    raise NotImplementedError("your code here")


@pytest.fixture(scope="module")
def parts(smollm2):
    return decoder_parts(smollm2)


# ------------------------------------------------------------------ the layer

def test_the_model_layer_is_one_step_of_its_forward_pass(smollm2):
    hidden = smollm2.hidden_states(smollm2.encode("One step of the forward pass."))
    for i in (0, 17, 29):
        np.testing.assert_array_equal(smollm2.layer(hidden[i], i)[0], hidden[i + 1])


def test_what_the_layer_receives(smollm2):
    cfg, p = layer_config(smollm2), layer_weights(smollm2, 3)
    assert cfg == {"n_heads": 9, "n_kv_heads": 3, "d_k": 64, "eps": smollm2.eps, "rope_base": smollm2.rope_base}
    d, h, n_kv, d_k = smollm2.d_model, 9, 3, 64
    assert p["W_Q"].shape == (d, h * d_k) and p["W_K"].shape == p["W_V"].shape == (d, n_kv * d_k)
    assert p["W_O"].shape == (h * d_k, d) and p["attn_norm"].shape == p["ffn_norm"].shape == (d,)
    assert p["W_gate"].shape == p["W_up"].shape == p["W_down"].T.shape
    assert not p["W_Q"].flags.writeable  # views of the shared memory map: the reader cannot change the model
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 30\), got 30"):
        layer_weights(smollm2, 30)


@pytest.mark.parametrize("layer", [0, 3, 29])
def test_a_layer_written_from_the_definitions_passes(smollm2, layer):
    fb = check_decoder_layer(solution.decoder_layer, layer=layer)
    assert fb.ok, fb.message
    assert f"layer {layer} of the real SmolLM2" in fb.message


def test_a_float32_layer_built_on_the_taught_pieces_passes(smollm2):
    """apply_rope, causal_mask, softmax and the blocks are allowed; the attention is the reader's."""
    from mha_core import apply_rope, causal_mask, softmax
    from mha_core.models.blocks import rms_norm, swiglu

    def layer(x, p, cfg):
        h, n_kv = cfg["n_heads"], cfg["n_kv_heads"]
        xn = rms_norm(x, p["attn_norm"], cfg["eps"])
        q = apply_rope((xn @ p["W_Q"]).reshape(-1, h, 64).transpose(1, 0, 2), base=cfg["rope_base"])
        k = apply_rope((xn @ p["W_K"]).reshape(-1, n_kv, 64).transpose(1, 0, 2), base=cfg["rope_base"])
        v = (xn @ p["W_V"]).reshape(-1, n_kv, 64).transpose(1, 0, 2)
        k, v = np.repeat(k, h // n_kv, 0), np.repeat(v, h // n_kv, 0)
        w = softmax(q @ k.transpose(0, 2, 1) / 8.0, mask=causal_mask(x.shape[0]))
        a = x + (w @ v).transpose(1, 0, 2).reshape(x.shape[0], -1) @ p["W_O"]
        return a + swiglu(rms_norm(a, p["ffn_norm"], cfg["eps"]), p["W_gate"], p["W_up"], p["W_down"])

    fb = check_decoder_layer(layer)
    assert fb.ok, fb.message


@pytest.mark.parametrize("name", [m.name for m in DECODER_MISTAKES] + ["kv_not_repeated"])
def test_each_layer_mistake_is_named(smollm2, name):
    fb = check_decoder_layer(solution.wrong_layer(name))
    assert not fb.ok and fb.attempted
    assert fb.pitfall == name, fb.message
    assert "Fix:" in fb.message


def test_every_layer_mistake_is_far_outside_the_tolerance(smollm2):
    """The right answer (plain NumPy, float64) is within LAYER_RTOL on both cases; each named mistake
    is off by 100x that on at least one, so no mistake passes and no right answer is named."""
    from mha_core.teaching import decoder_exercises as dx

    p, cfg = layer_weights(smollm2, dx.DECODER_LAYER), layer_config(smollm2)
    cases = dx._layer_cases(smollm2, dx.DECODER_LAYER, dx.DECODER_TEXT)
    assert max(dx._relative_error(solution.decoder_layer(x, p, cfg), want) for _, x, want in cases) < dx.LAYER_RTOL / 10
    for m in DECODER_MISTAKES:
        gap = max(dx._relative_error(dx._layer(x, p, cfg, **m.options), want) for _, x, want in cases)
        assert gap > 100 * dx.LAYER_RTOL, m.name


def test_the_layer_checker_names_every_mistake_the_issue_lists():
    issue = {"rope_on_v", "rope_on_scores", "rope_after_attention", "kv_tiled", "layer_norm", "eps_outside_sqrt",
             "no_attention_residual", "no_ffn_residual", "no_causal_mask", "silu_gate_swapped"}
    assert issue <= {m.name for m in DECODER_MISTAKES}


def test_the_layer_blank_crash_library_shape_and_input(smollm2):
    assert not check_decoder_layer(stub).attempted

    def crash(x, p, cfg):
        return x @ p["W_down"]

    fb = check_decoder_layer(crash)
    assert fb.attempted and not fb.ok and "raised ValueError" in fb.message

    def library(x, p, cfg):
        return multi_head_attention(x, {k: p[k] for k in ("W_Q", "W_K", "W_V", "W_O")}, 9, n_kv_heads=3,
                                    causal=True, rope_base=cfg["rope_base"])

    fb = check_decoder_layer(library)
    assert not fb.ok and "calls mha_core's multi_head_attention" in fb.message

    fb = check_decoder_layer(lambda x, p, cfg: x[:, :10])
    assert not fb.ok and "Wrong shape" in fb.message

    def in_place(x, p, cfg):
        out = solution.decoder_layer(x, p, cfg)
        x += 1
        return out

    fb = check_decoder_layer(in_place)
    assert not fb.ok and "in place" in fb.message


def test_the_layer_checker_refuses_bad_arguments(smollm2):
    with pytest.raises(TypeError, match="fn must be your function"):
        check_decoder_layer("decoder_layer")
    with pytest.raises(ValueError, match="layer must be an int"):
        check_decoder_layer(solution.decoder_layer, layer=-1)
    with pytest.raises(TypeError, match="text must be a non-empty str"):
        check_decoder_layer(solution.decoder_layer, text="")


# ------------------------------------------------------------------ the generation loop

@pytest.mark.parametrize("prompt", THREE_PROMPTS)
def test_a_loop_written_from_the_definitions_writes_smollm2s_greedy_tokens(smollm2, parts, prompt):
    ids = smollm2.encode(prompt)
    want = [s.id for s in smollm2.write(ids, 8)]
    assert solution.generate(ids, len(want), parts) == want
    fb = check_generation_loop(solution.generate, prompt=prompt)
    assert fb.ok, fb.message
    assert repr(smollm2.decode(want)) in fb.message


def test_a_loop_over_the_librarys_cached_layer_passes(smollm2):
    """The loop may use the core's prefill and decode_step for the attention (the library's layer)."""
    from mha_core.models.blocks import rms_norm, swiglu

    def generate(ids, n_new, parts):
        cfg = parts.config
        kw = {"n_kv_heads": cfg["n_kv_heads"], "rope_base": cfg["rope_base"]}
        attn = [{k: p[k] for k in ("W_Q", "W_K", "W_V", "W_O")} for p in parts.layers]
        caches = [init_kv_cache(a, cfg["n_heads"], len(ids) + n_new, n_kv_heads=cfg["n_kv_heads"]) for a in attn]

        def ffn(x, p):
            return x + swiglu(rms_norm(x, p["ffn_norm"], cfg["eps"]), p["W_gate"], p["W_up"], p["W_down"])

        x = parts.embed(ids)
        for p, a, c in zip(parts.layers, attn, caches, strict=True):
            xn = rms_norm(x, p["attn_norm"], cfg["eps"])
            prefill(xn, a, cfg["n_heads"], c, **kw)
            x = ffn(x + multi_head_attention(xn, a, cfg["n_heads"], causal=True, **kw), p)
        out = [int(np.argmax(parts.head(x[-1:])[0]))]
        while len(out) < n_new:
            x = parts.embed([out[-1]])[0]
            for p, a, c in zip(parts.layers, attn, caches, strict=True):
                x = ffn((x + decode_step(rms_norm(x, p["attn_norm"], cfg["eps"]), a, cfg["n_heads"], c, **kw))[None],
                        p)[0]
            out.append(int(np.argmax(parts.head(x[None])[0])))
        return out

    fb = check_generation_loop(generate)
    assert fb.ok, fb.message


def test_recomputing_the_prefix_is_named_with_both_timings(smollm2):
    fb = check_generation_loop(solution.generate_recomputed)
    assert not fb.ok and fb.pitfall == "recomputes_prefix"
    assert "Your tokens are right" in fb.message
    n = smollm2.encode("The capital of France is").size
    assert f"with a KV cache it is {n + 7}" in fb.message
    assert re.search(r"Your loop took \d+\.\d\d s; SmolLM2's own write takes \d+\.\d\d s with its cache and "
                     r"\d+\.\d\d s recomputing", fb.message)


def test_running_the_last_token_written_is_named_apart_from_recomputing(smollm2):
    """A cached loop that also sends its last token through the layers (one pass too many) is told
    so, not told to keep a cache it already keeps."""
    fb = check_generation_loop(solution.wrong_loop("last_token_run"))
    assert not fb.ok and fb.pitfall == "last_token_run", fb.message
    n = smollm2.encode("The capital of France is").size
    assert f"{n + 8} tokens where {n + 7} do" in fb.message
    assert "keeps a KV cache" in fb.message and "Fix:" in fb.message
    assert "keep each layer's K and V" not in fb.message


@pytest.mark.parametrize("mistake", ["positions_not_advanced", "positions_fixed", "cache_appended_twice",
                                     "no_self_attention", "keys_cached_before_rope", "last_prompt_token_twice"])
def test_each_loop_mistake_is_named(smollm2, mistake):
    fb = check_generation_loop(solution.wrong_loop(mistake))
    name = "positions_not_advanced" if mistake == "positions_fixed" else mistake
    assert not fb.ok and fb.pitfall == name, fb.message
    assert name in {m.name for m in LOOP_MISTAKES}


def test_the_loop_blank_crash_wrong_length_and_the_models_own_write(smollm2):
    assert not check_generation_loop(stub).attempted
    fb = check_generation_loop(lambda ids, n, parts: [0] * (n - 1))
    assert not fb.ok and "returned 7 token ids; expected n_new = 8" in fb.message
    fb = check_generation_loop(lambda ids, n, parts: parts.head(ids))
    assert fb.attempted and not fb.ok and "raised" in fb.message
    fb = check_generation_loop(lambda ids, n, parts: [s.id for s in smollm2.write(ids, n)])
    assert not fb.ok and "never called parts.embed and parts.head" in fb.message


def test_the_loop_checker_refuses_bad_arguments(smollm2):
    with pytest.raises(TypeError, match="fn must be your function"):
        check_generation_loop(None)
    for bad in (0, 33, True, 2.0):
        with pytest.raises(ValueError, match=r"max_new_tokens must be an int in \[1, 32\]"):
            check_generation_loop(solution.generate, max_new_tokens=bad)
    with pytest.raises(TypeError, match="prompt must be a non-empty str"):
        check_generation_loop(solution.generate, prompt=" ")
    with pytest.raises(TypeError, match="model must be SmolLM2"):
        decoder_parts(object())


@pytest.mark.slow
@pytest.mark.transformers
def test_the_independent_loop_matches_transformers_greedy_generate(smollm2, smollm2_reference, parts):
    import torch

    model, _ = smollm2_reference
    for prompt in THREE_PROMPTS:
        ids = smollm2.encode(prompt)
        with torch.no_grad():
            ref = model.generate(torch.from_numpy(ids)[None], max_new_tokens=8, do_sample=False)[0].numpy()
        new = ref[ids.size:].tolist()  # transformers stops at the same end-of-text token
        assert len(new) >= 1
        assert solution.generate(ids, len(new), parts) == new, prompt
