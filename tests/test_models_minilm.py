"""all-MiniLM-L6-v2 through the core (mha_core.models.minilm) against transformers' BertModel
on the same weights: every layer's hidden states and attention weights within 1e-4, and the
token ids of the pure-Python BertTokenizer."""

from __future__ import annotations

import numpy as np
import pytest
from head_mask_reference import head_masks, whole_layer_off, zeroed_heads

TOL = 1e-4


def test_config_and_special_tokens(minilm):
    assert (minilm.n_layers, minilm.n_heads, minilm.n_kv_heads, minilm.d_model, minilm.d_k) == (6, 12, 12, 384, 32)
    assert minilm.vocab_size == 30_522 and not minilm.causal and not minilm.quantised
    ids = minilm.encode("Hello, World!")
    assert minilm.tokens(ids) == ["[CLS]", "hello", ",", "world", "!", "[SEP]"]
    assert minilm.decode(ids) == "hello, world!"


def test_an_encoder_has_no_logits(minilm):
    with pytest.raises(ValueError, match="encoder without a language-model head"):
        minilm.logits(minilm.encode("hello"))


def test_every_token_sees_every_token(minilm):
    maps = minilm.attention(minilm.encode("no causal mask in an encoder"))
    assert (maps[:, :, 0, -1] > 0).all()  # the first token attends to the last


@pytest.mark.transformers
def test_token_ids_equal_the_reference_tokenizer(minilm, minilm_reference, sentences):
    _, tokenizer = minilm_reference
    for text in sentences:
        np.testing.assert_array_equal(minilm.encode(text), tokenizer(text)["input_ids"], err_msg=text)


@pytest.mark.transformers
def test_hidden_states_and_attention_match_transformers(minilm, minilm_reference, sentences, compare_layers):
    import torch

    model, _ = minilm_reference
    worst = {"hidden": 0.0, "attention": 0.0}
    for text in sentences:
        ids = minilm.encode(text)
        with torch.no_grad():
            ref = model(torch.from_numpy(ids)[None], output_attentions=True, output_hidden_states=True)
        ours = minilm.forward(ids)
        worst["hidden"] = max(worst["hidden"], compare_layers(ours.hidden, ref.hidden_states, TOL, "hidden state", text))
        worst["attention"] = max(worst["attention"], compare_layers(ours.attention, ref.attentions, TOL, "attention", text))
    print(f"\nMiniLM vs transformers, max abs diff: hidden {worst['hidden']:.2e}, attention {worst['attention']:.2e}")


@pytest.mark.transformers
def test_head_mask_matches_bertmodel_with_heads_zeroed(minilm, minilm_reference):
    """head_mask against BertModel with the same heads' columns zeroed at the input of each
    layer's attention output projection (a forward pre-hook), for several masks."""
    import torch

    model, _ = minilm_reference
    projs = [layer.attention.output.dense for layer in model.encoder.layer]
    ids = minilm.encode("The animal didn't cross the street because it was too tired.")
    worst = 0.0
    unmasked = minilm.hidden_states(ids)[-1]
    for mask in [*head_masks(minilm.n_layers, minilm.n_heads, ((2, 9), (4, 5))),
                 whole_layer_off(minilm.n_layers, minilm.n_heads)]:
        with zeroed_heads(projs, mask, minilm.d_k), torch.no_grad():
            ref = model(torch.from_numpy(ids)[None], output_hidden_states=True).hidden_states[-1][0].numpy()
        ours = minilm.forward(ids, head_mask=mask).hidden[-1]
        err = float(np.abs(ours - ref).max())
        assert err < TOL, f"last hidden state off by {err:.2e} with {int((~mask).sum())} heads off"
        assert np.abs(ours - unmasked).max() > 1e-2  # the mask changed the output
        worst = max(worst, err)
    print(f"\nMiniLM head_mask vs BertModel (output-projection pre-hook), max abs diff: {worst:.2e}")
