"""SmolLM2-135M-Instruct through the core (mha_core.models.smollm2): causal GQA with RoPE,
greedy decoding, and (slow) every layer's attention and the logits against transformers' Llama
loaded from the same GGUF, within 1e-3, with the same token ids."""

from __future__ import annotations

import numpy as np
import pytest
from head_mask_reference import head_masks, whole_layer_off, zeroed_heads

from mha_core import MHAConfig, kv_cache_bytes, multi_head_attention
from mha_core.models.blocks import rms_norm

TOL = 1e-3


def test_config(smollm2):
    assert (smollm2.n_layers, smollm2.n_heads, smollm2.n_kv_heads, smollm2.d_model, smollm2.d_k) == (30, 9, 3, 576, 64)
    assert smollm2.vocab_size == 49_152 and smollm2.causal and smollm2.quantised
    assert smollm2.rope_base == pytest.approx(1e5)
    assert "4-bit" in smollm2.label


def test_no_bos_and_display_tokens(smollm2):
    ids = smollm2.encode("The capital of France is")
    assert ids.tolist() == [504, 3575, 282, 4649, 314]  # the ids transformers' GGUF tokenizer gives
    assert smollm2.tokens(ids) == ["The", " capital", " of", " France", " is"]
    assert "".join(smollm2.tokens(smollm2.encode("naïve café 東京"))).startswith("naïve café")


def test_attention_is_causal(smollm2):
    maps = smollm2.attention(smollm2.encode("Each token sees only the past."))
    n = maps.shape[-1]
    assert np.all(maps[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0)
    np.testing.assert_allclose(maps[:, :, 0, 0], 1.0)


def test_greedy_decoding_says_paris(smollm2):
    ids, text = smollm2.generate("The capital of France is", max_new_tokens=2)
    assert text.startswith(" Paris"), text
    assert ids.size == 7
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        smollm2.generate("The capital of France is", max_new_tokens=0)


def test_logits_shape(smollm2):
    ids = smollm2.encode("Hello there")
    assert smollm2.logits(ids).shape == (ids.size, smollm2.vocab_size)


@pytest.mark.slow
@pytest.mark.transformers
def test_token_ids_equal_the_reference_tokenizer(smollm2, smollm2_reference, sentences):
    _, tokenizer = smollm2_reference
    for text in (*sentences, "<|im_start|>user\nHi<|im_end|>", "1234567890 and 12 345"):
        np.testing.assert_array_equal(smollm2.encode(text), tokenizer(text)["input_ids"], err_msg=text)


@pytest.mark.slow
@pytest.mark.transformers
def test_attention_and_logits_match_transformers(smollm2, smollm2_reference, sentences, compare_layers):
    import torch

    model, _ = smollm2_reference
    worst = {"attention": 0.0, "logits": 0.0}
    for text in sentences:
        ids = smollm2.encode(text)
        with torch.no_grad():
            ref = model(torch.from_numpy(ids)[None], output_attentions=True)
        ours = smollm2.forward(ids)
        worst["attention"] = max(worst["attention"], compare_layers(ours.attention, ref.attentions, TOL, "attention", text))
        err = float(np.abs(ours.logits - ref.logits[0].numpy()).max())
        assert err < TOL, f"logits off by {err:.2e} on {text!r}"
        worst["logits"] = max(worst["logits"], err)
        assert ours.logits[-1].argmax() == int(ref.logits[0, -1].argmax())
    print(f"\nSmolLM2 vs transformers, max abs diff: attention {worst['attention']:.2e}, logits {worst['logits']:.2e}")


def test_next_token_losses_and_a_repeated_passage(smollm2):
    """Random tokens, then the same tokens again: the second copy is predictable (induction)."""
    rng = np.random.default_rng(0)
    first = rng.integers(1_000, 20_000, size=30)
    ids = np.concatenate([first, first])  # (60,)
    losses = smollm2.next_token_losses(ids)
    assert losses.shape == (59,) and np.all(losses >= 0)
    logits = smollm2.logits(ids).astype(np.float64)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(losses, -np.log(p[np.arange(59), ids[1:]]), rtol=1e-6, atol=1e-6)
    assert losses[30:].mean() < losses[:29].mean() / 2  # the second copy is far less surprising
    with pytest.raises(ValueError, match="at least 2 tokens"):
        smollm2.next_token_losses(ids[:1])


PROMPTS = ("The capital of France is", "def fibonacci(n):", "Once upon a time", "1, 2, 3, 4,")


def test_cached_generation_gives_the_same_tokens_as_recomputation(smollm2):
    for prompt in PROMPTS[:2]:
        cached = smollm2.generate(prompt, max_new_tokens=6)
        full = smollm2.generate(prompt, max_new_tokens=6, use_cache=False)
        np.testing.assert_array_equal(cached[0], full[0], err_msg=prompt)
        assert cached[1] == full[1]


def test_write_steps_carry_the_attention_rows_and_the_cache_bytes(smollm2):
    """Each step's weights equal the full causal forward's row of the query that chose the token,
    and the caches hold n_kv = 3 heads per layer for the t tokens before the new one."""
    prompt = smollm2.encode("Attention of every new token:")
    steps = list(smollm2.write(prompt, 4))
    ids = np.append(prompt, [s.id for s in steps])
    recomputed = list(smollm2.write(prompt, 4, use_cache=False))
    assert [s.id for s in recomputed] == [s.id for s in steps]
    full = smollm2.attention(ids)  # (layers, h, N, N)
    cfg = MHAConfig(smollm2.d_model, smollm2.n_heads, n_kv_heads=smollm2.n_kv_heads)
    for k, step in enumerate(steps):
        t = prompt.size + k  # tokens before the new one
        assert step.weights.shape == (smollm2.n_layers, smollm2.n_heads, t)
        np.testing.assert_allclose(step.weights, full[:, :, t - 1, :t], atol=2e-5)
        np.testing.assert_allclose(recomputed[k].weights, full[:, :, t - 1, :t], atol=2e-5)
        assert step.cache_bytes == kv_cache_bytes(cfg, t, n_layers=smollm2.n_layers, dtype=np.float32)


def test_generate_refuses_bad_arguments(smollm2):
    with pytest.raises(TypeError, match="use_cache must be True or False"):
        smollm2.generate("Hi", use_cache="yes")
    with pytest.raises(ValueError, match="over the cap"):
        smollm2.generate("Hi", max_new_tokens=200)
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        smollm2.write(smollm2.encode("Hi"), 0)
    with pytest.raises(TypeError, match="use_cache must be True or False"):
        smollm2.write(smollm2.encode("Hi"), 2, use_cache=1)


# The five heads with the highest induction score (notebook 11_real_heads switches them off).
INDUCTION_HEADS = ((18, 6), (17, 4), (17, 3), (17, 5), (18, 7))
# With a whole early layer off, SmolLM2's first-token "massive activation" (hundreds of times
# the other tokens' size) changes, and float32 rounding in the two implementations grows with it:
# 1.6e-3 on the logits when this test was written. Checked at this looser tolerance.
WHOLE_LAYER_TOL = 5e-3


@pytest.mark.slow
@pytest.mark.transformers
def test_head_mask_matches_transformers_with_heads_zeroed(smollm2, smollm2_reference):
    import torch

    model, _ = smollm2_reference
    projs = [layer.self_attn.o_proj for layer in model.model.layers]
    ids = smollm2.encode("The animal didn't cross the street because it was too tired.")
    worst = {}
    masks = [(m, TOL) for m in head_masks(smollm2.n_layers, smollm2.n_heads, INDUCTION_HEADS)]
    masks.append((whole_layer_off(smollm2.n_layers, smollm2.n_heads), WHOLE_LAYER_TOL))
    unmasked = smollm2.logits(ids)
    for mask, tol in masks:
        with zeroed_heads(projs, mask, smollm2.d_k), torch.no_grad():
            ref = model(torch.from_numpy(ids)[None]).logits[0].numpy()
        ours = smollm2.logits(ids, head_mask=mask)
        err = float(np.abs(ours - ref).max())
        off = int((~mask).sum())
        assert err < tol, f"logits off by {err:.2e} with {off} heads off"
        assert np.abs(ours - unmasked).max() > 10 * TOL  # the mask really changed the logits
        worst[off] = err
    print("\nSmolLM2 head_mask vs transformers (o_proj pre-hook), max abs logit diff by heads off: "
          + ", ".join(f"{k}: {v:.2e}" for k, v in worst.items()))


@pytest.mark.slow
@pytest.mark.transformers
def test_cached_generation_matches_transformers_greedy_generate(smollm2, smollm2_reference):
    import torch

    model, _ = smollm2_reference
    for prompt in PROMPTS:
        ids, _ = smollm2.generate(prompt, max_new_tokens=8)
        prompt_ids = smollm2.encode(prompt)
        with torch.no_grad():
            ref = model.generate(torch.from_numpy(prompt_ids)[None], max_new_tokens=8, do_sample=False)[0].numpy()
        n = min(ids.size, ref.size)  # the reference stops at the same end-of-text token
        np.testing.assert_array_equal(ids[:n], ref[:n], err_msg=prompt)
        assert n >= prompt_ids.size + 1


def test_head_logit_effects_sum_with_the_rest_to_the_logits(smollm2):
    """The direct path of every head of the last layer, plus the rest of the stream, through the
    same frozen final-norm scale and unembedding, gives the model's logits."""
    ids = smollm2.encode("A head writes into the logits.")
    last = smollm2.n_layers - 1
    effects = smollm2.head_logit_effects(ids, [(last, h) for h in range(smollm2.n_heads)])  # (h, N, vocab)
    assert effects.shape == (smollm2.n_heads, ids.size, smollm2.vocab_size)
    f = smollm2.forward(ids)
    x = f.hidden[-1]  # (N, d_model)
    scale = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + smollm2.eps)
    p = smollm2.layers[last]
    xn = rms_norm(f.hidden[last], p["attn_norm"], smollm2.eps)
    attn = multi_head_attention(xn, {k: p[k] for k in ("W_Q", "W_K", "W_V", "W_O")}, 9, n_kv_heads=3, causal=True,
                                rope_base=smollm2.rope_base)  # (N, d_model): the sum of the 9 heads
    rest = (x - attn) * scale * smollm2.arrays["out_norm"] @ smollm2.arrays["tok_embed"].T  # (N, vocab)
    np.testing.assert_allclose(effects.sum(0) + rest, f.logits, atol=2e-3)
    with pytest.raises(ValueError, match=r"\(layer, head\) pair"):
        smollm2.head_logit_effects(ids, [(30, 0)])
    with pytest.raises(ValueError, match="non-empty list"):
        smollm2.head_logit_effects(ids, [])
