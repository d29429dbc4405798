"""Each pitfall is wrong in exactly the advertised way, and only that way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from references import attention_by_loops

from mha_core import (
    MHAConfig,
    causal_mask,
    head_outputs,
    init_params,
    merge_heads,
    multi_head_attention,
    scaled_dot_product_attention,
    softmax,
    split_heads,
)
from mha_core.teaching import pitfalls as pf

H, N, D_K = 4, 6, 8


@pytest.fixture
def qkv():
    rng = np.random.default_rng(1)
    return tuple(rng.standard_normal((H, N, D_K)) for _ in range(3))  # (h, N, d_k) each


def loops_per_head(q, k, v, scale):
    """``attention_by_loops`` on each head of (h, N, d) arrays: (h, N_q, d_v), (h, N_q, N_k)."""
    outs, weights = zip(*(attention_by_loops(q[i].tolist(), k[i].tolist(), v[i].tolist(), scale=scale)
                          for i in range(len(q))), strict=True)
    return np.stack(outs), np.stack(weights)


def test_sqrt_d_model_is_attention_with_the_wrong_scale(qkv):
    q, k, v = qkv
    out, w = pf.attention_scaled_by_sqrt_d_model(q, k, v)
    ref_out, ref_w = loops_per_head(q, k, v, scale=1 / np.sqrt(H * D_K))  # d_model = h * d_k = 32
    np.testing.assert_allclose(out, ref_out, rtol=1e-10)
    np.testing.assert_allclose(w, ref_w, rtol=1e-10)
    right_out, right_w = scaled_dot_product_attention(q, k, v)
    assert np.abs(out - right_out).max() > 1e-2
    # over-damped logits: every row is flatter (higher entropy) than the right one
    assert (pf.attention_entropy(w) > pf.attention_entropy(right_w)).all()


def test_sqrt_d_model_needs_the_heads_axis():
    x = np.ones((N, D_K))
    with pytest.raises(ValueError, match="q must have at least 3 dimensions"):
        pf.attention_scaled_by_sqrt_d_model(x, x, x)


def test_unscaled_is_attention_with_scale_one(qkv):
    q, k, v = qkv
    out, w = pf.attention_without_scale(q, k, v)
    ref_out, ref_w = loops_per_head(q, k, v, scale=1.0)
    np.testing.assert_allclose(out, ref_out, rtol=1e-10)
    np.testing.assert_allclose(w, ref_w, rtol=1e-10)
    right_w = scaled_dot_product_attention(q, k, v)[1]
    assert (w.max(-1) >= right_w.max(-1) - 1e-12).mean() > 0.9  # sharper almost everywhere


def test_softmax_over_queries_normalises_columns(qkv):
    q, k, v = qkv
    _, w = pf.attention_softmax_over_queries(q, k, v)
    np.testing.assert_allclose(w.sum(axis=-2), 1.0)
    assert not np.allclose(w.sum(axis=-1), 1.0)
    x = np.random.default_rng(2).standard_normal((3, 4, 5))
    e = np.exp(x)  # small logits: the textbook formula is safe here
    np.testing.assert_allclose(pf.softmax_over_queries(x), e / e.sum(axis=-2, keepdims=True), rtol=1e-12)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        pf.softmax_over_queries(np.ones(3))


def test_mask_after_softmax_leaks_and_does_not_renormalise(qkv):
    q, k, v = qkv
    mask = causal_mask(N)
    # without a mask there is nothing to get wrong
    np.testing.assert_allclose(
        pf.attention_mask_after_softmax(q, k, v)[0], scaled_dot_product_attention(q, k, v)[0]
    )
    _, w = pf.attention_mask_after_softmax(q, k, v, mask)
    assert (w[..., ~mask] == 0).all()  # the future is zeroed ...
    sums = w.sum(axis=-1)  # (h, N)
    assert (sums[:, :-1] < 1 - 1e-6).all()  # ... but rows that had a future sum to less than 1
    np.testing.assert_allclose(sums[:, -1], 1.0)  # the last query had no future to lose
    # renormalising the rows recovers the right weights
    right_w = scaled_dot_product_attention(q, k, v, mask)[1]
    np.testing.assert_allclose(w / sums[..., None], right_w, rtol=1e-10)


def test_unstable_softmax_agrees_when_small_and_overflows_when_large():
    rng = np.random.default_rng(3)
    small = rng.standard_normal((4, 7))
    np.testing.assert_allclose(pf.softmax_without_max_subtraction(small), softmax(small), rtol=1e-12)
    large = small + 1000.0
    assert np.isnan(pf.softmax_without_max_subtraction(large)).all()
    assert np.isfinite(softmax(large)).all()
    big32 = (small + 100.0).astype(np.float32)  # exp(100) overflows float32
    assert np.isnan(pf.softmax_without_max_subtraction(big32)).any()


def test_wrong_causal_masks_by_hand():
    # n = 3, query i in rows, key j in columns; the right mask is [[1,0,0],[1,1,0],[1,1,1]].
    np.testing.assert_array_equal(pf.causal_mask_upper(3), [[1, 1, 1], [0, 1, 1], [0, 0, 1]])
    np.testing.assert_array_equal(pf.causal_mask_without_diagonal(3), [[0, 0, 0], [1, 0, 0], [1, 1, 0]])
    np.testing.assert_array_equal(pf.causal_mask_inverted(3), [[0, 1, 1], [0, 0, 1], [0, 0, 0]])


@pytest.mark.parametrize("n", [1, 2, 7])
def test_wrong_causal_masks(n):
    i, j = np.indices((n, n))  # query, key
    np.testing.assert_array_equal(pf.causal_mask_upper(n), j >= i)  # sees the future, not the past
    np.testing.assert_array_equal(pf.causal_mask_without_diagonal(n), j < i)  # not itself
    assert not pf.causal_mask_without_diagonal(n)[0].any()  # the first token sees nothing
    np.testing.assert_array_equal(pf.causal_mask_inverted(n), j > i)  # only the future
    assert not (pf.causal_mask_inverted(n) & causal_mask(n)).any()
    for fn in (pf.causal_mask_upper, pf.causal_mask_without_diagonal, pf.causal_mask_inverted):
        assert fn(n).dtype == np.bool_ and fn(n).shape == (n, n)


@pytest.mark.parametrize(
    "fn", [pf.causal_mask_upper, pf.causal_mask_without_diagonal, pf.causal_mask_inverted]
)
def test_wrong_masks_validate_n(fn):
    with pytest.raises(ValueError, match="n must be a positive int"):
        fn(0)
    with pytest.raises(TypeError, match="n must be a positive int"):
        fn(2.0)


@pytest.mark.parametrize("shape", [(N, H * D_K), (2, N, H * D_K)])
def test_split_without_transpose_has_right_shape_wrong_values(shape):
    x = np.random.default_rng(4).standard_normal(shape)
    wrong, right = pf.split_heads_without_transpose(x, H), split_heads(x, H)
    assert wrong.shape == right.shape
    assert not np.allclose(wrong, right)
    # same multiset of numbers, only rearranged
    np.testing.assert_array_equal(np.sort(wrong, axis=None), np.sort(right, axis=None))


def test_split_without_transpose_is_harmless_only_in_degenerate_cases():
    rng = np.random.default_rng(5)
    one_token = rng.standard_normal((1, H * D_K))
    np.testing.assert_array_equal(pf.split_heads_without_transpose(one_token, H), split_heads(one_token, H))
    one_head = rng.standard_normal((N, D_K))
    np.testing.assert_array_equal(pf.split_heads_without_transpose(one_head, 1), split_heads(one_head, 1))


@settings(max_examples=60, deadline=None)
@given(
    lead=st.lists(st.integers(1, 3), max_size=2),
    n=st.integers(1, 6),
    h=st.integers(1, 5),
    d=st.integers(1, 4),
)
def test_split_without_transpose_scrambles_exactly_when_n_and_h_exceed_one(lead, n, h, d):
    x = np.arange(np.prod([*lead, n, h * d])).reshape(*lead, n, h * d)  # (..., N, h*d), all distinct
    wrong, right = pf.split_heads_without_transpose(x, h), split_heads(x, h)
    assert wrong.shape == right.shape == (*lead, h, n, d)
    assert np.array_equal(wrong, right) == (n == 1 or h == 1)
    np.testing.assert_array_equal(pf.merge_heads_without_transpose(wrong), x)  # its own inverse
    np.testing.assert_array_equal(merge_heads(right), x)


def test_merge_without_transpose_undoes_split_without_transpose_only():
    x = np.random.default_rng(6).standard_normal((N, H * D_K))
    np.testing.assert_array_equal(pf.merge_heads_without_transpose(pf.split_heads_without_transpose(x, H)), x)
    heads = split_heads(x, H)  # (h, N, d_k)
    assert not np.allclose(pf.merge_heads_without_transpose(heads), merge_heads(heads))


def test_split_and_merge_validate():
    with pytest.raises(TypeError, match="x must be a numpy.ndarray"):
        pf.split_heads_without_transpose([[1.0]], 1)
    with pytest.raises(ValueError, match="does not divide"):
        pf.split_heads_without_transpose(np.ones((2, 6)), 4)
    with pytest.raises(ValueError, match="at least 3 dimensions"):
        pf.merge_heads_without_transpose(np.ones((2, 6)))


def test_no_w_o_is_the_concat_and_keeps_heads_unmixed():
    d_model, h = 16, 4
    rng = np.random.default_rng(7)
    params = init_params(MHAConfig(d_model, h), rng, dtype=np.float64)
    x = rng.standard_normal((N, d_model))
    concat = pf.multi_head_attention_without_w_o(x, params, h)
    np.testing.assert_allclose(concat, merge_heads(head_outputs(x, params, h)))
    np.testing.assert_allclose(concat @ params["W_O"], multi_head_attention(x, params, h), rtol=1e-10)
    # change only head 0's query weights: only output block 0 moves without W_O ...
    p2 = dict(params, W_Q=params["W_Q"].copy())
    p2["W_Q"][:, :4] += 1.0
    delta = np.abs(pf.multi_head_attention_without_w_o(x, p2, h) - concat).max(axis=0)  # (d_model,)
    assert (delta[:4] > 1e-3).all() and (delta[4:] == 0).all()
    # ... while with W_O every output column moves
    full_delta = np.abs(multi_head_attention(x, p2, h) - multi_head_attention(x, params, h)).max(axis=0)
    assert (full_delta > 1e-6).all()


def test_attention_entropy():
    n = 5
    uniform = np.full((3, n), 1 / n)
    np.testing.assert_allclose(pf.attention_entropy(uniform), np.log(n))
    one_hot = np.eye(n)
    np.testing.assert_allclose(pf.attention_entropy(one_hot), 0.0)
    assert pf.attention_entropy(np.ones((2, 3, 4)) / 4).shape == (2, 3)
    with pytest.raises(ValueError, match="non-negative"):
        pf.attention_entropy(np.array([[-0.5, 1.5]]))


def test_attention_pitfalls_validate(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match="same d_k"):
        pf.attention_without_scale(q, k[..., :2], v)
    with pytest.raises(TypeError, match="mask must have dtype bool"):
        pf.attention_mask_after_softmax(q, k, v, np.ones((N, N)))


def test_registry():
    assert len(pf.PITFALLS) >= 12
    for name, p in pf.PITFALLS.items():
        assert p.name == name
        assert callable(p.fn) and p.fn.__name__ in pf.__all__
        assert p.explanation and "\n" not in p.explanation
        assert p.answer and "\n" not in p.answer and not p.answer.endswith(".")
        assert "WRONG" in p.fn.__doc__
    with pytest.raises(TypeError):
        pf.PITFALLS["new"] = None  # read-only


@pytest.mark.parametrize("causal", [False, True])
def test_layer_without_transpose_is_right_only_for_one_head(causal):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, N, 16))  # (B, N, d_model)
    one = init_params(MHAConfig(16, 1), rng, dtype=np.float64)
    np.testing.assert_allclose(pf.multi_head_attention_without_transpose(x, one, 1, causal=causal),
                               multi_head_attention(x, one, 1, causal=causal), rtol=1e-12, atol=1e-12)
    four = init_params(MHAConfig(16, 4), rng, dtype=np.float64)
    wrong = pf.multi_head_attention_without_transpose(x, four, 4, causal=causal)
    right = multi_head_attention(x, four, 4, causal=causal)
    assert wrong.shape == right.shape  # the shapes never reveal the mistake ...
    assert np.linalg.norm(wrong - right) > 0.1 * np.linalg.norm(right)  # ... the numbers do


def test_layer_without_transpose_rejects_bad_params():
    params = init_params(MHAConfig(16, 4, bias=True), 0, dtype=np.float64)
    with pytest.raises(ValueError, match="no biases"):
        pf.multi_head_attention_without_transpose(np.ones((N, 16)), params, 4)
    with pytest.raises(ValueError, match="n_heads=3"):
        pf.multi_head_attention_without_transpose(np.ones((N, 16)), init_params(MHAConfig(16, 4), 0, dtype=np.float64), 3)


# ---------------------------------------------------------------- the mistakes added for issue 16


def test_d_k_scale_is_attention_with_scale_one_over_d_k(qkv):
    q, k, v = qkv
    out, w = pf.attention_scaled_by_d_k(q, k, v)
    ref_out, ref_w = loops_per_head(q, k, v, scale=1 / D_K)
    np.testing.assert_allclose(out, ref_out, rtol=1e-10)
    np.testing.assert_allclose(w, ref_w, rtol=1e-10)
    # over-damped: flatter rows than the right sqrt(d_k) scale
    assert (pf.attention_entropy(w) > pf.attention_entropy(scaled_dot_product_attention(q, k, v)[1])).all()


def test_ignored_mask_is_the_unmasked_answer(qkv):
    q, k, v = qkv
    mask = causal_mask(N)
    out, w = pf.attention_ignoring_mask(q, k, v, mask)
    np.testing.assert_allclose(out, scaled_dot_product_attention(q, k, v)[0], rtol=1e-12)
    assert (w[..., ~mask] > 0).all()  # the future gets weight
    with pytest.raises(TypeError, match="mask"):
        pf.attention_ignoring_mask(q, k, v, np.ones((N, N)))  # still validated


def test_inverted_mask_attends_only_where_blocked(qkv):
    q, k, v = qkv
    mask = causal_mask(N)
    out, w = pf.attention_mask_inverted(q, k, v, mask)
    blocked = ~mask
    for i in range(H):  # rows with an allowed key: loops with the inverted mask
        ref_out, ref_w = attention_by_loops(q[i].tolist(), k[i].tolist(), v[i].tolist(), blocked.tolist())
        np.testing.assert_allclose(out[i], ref_out, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(w[i], ref_w, rtol=1e-10, atol=1e-12)
    assert (w[..., mask] == 0).all()  # exactly the allowed keys get nothing
    assert (w[..., -1, :] == 0).all()  # the last query blocks every key
    np.testing.assert_allclose(pf.attention_mask_inverted(q, k, v)[0], scaled_dot_product_attention(q, k, v)[0])


def test_multiplied_mask_gives_blocked_keys_weight(qkv):
    q, k, v = qkv
    mask = causal_mask(N)
    _, w = pf.attention_mask_by_multiplying(q, k, v, mask)
    scores = np.einsum("hqd,hkd->hqk", q, k) / np.sqrt(D_K) * mask  # blocked logits 0
    e = np.exp(scores)
    np.testing.assert_allclose(w, e / e.sum(-1, keepdims=True), rtol=1e-12)
    assert (w[..., ~mask] > 0).all()


@pytest.fixture
def layer():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, N, H * D_K))  # (B, N, d_model)
    return x, init_params(MHAConfig(H * D_K, H), rng, dtype=np.float64)


def test_split_only_and_merge_only_are_three_different_mistakes(layer):
    x, params = layer
    right = multi_head_attention(x, params, H)
    both = pf.multi_head_attention_without_transpose(x, params, H)
    split_only = pf.multi_head_attention_split_without_transpose(x, params, H)
    merge_only = pf.multi_head_attention_merge_without_transpose(x, params, H)
    outs = [right, both, split_only, merge_only]
    for i in range(4):
        for j in range(i):
            assert not np.allclose(outs[i], outs[j])
    # split only = the scrambled heads, merged back correctly
    q, k, v = (pf.split_heads_without_transpose(x @ params[w], H) for w in ("W_Q", "W_K", "W_V"))
    np.testing.assert_allclose(split_only, merge_heads(scaled_dot_product_attention(q, k, v)[0]) @ params["W_O"])
    # merge only = the right heads, merged by one reshape
    heads = head_outputs(x, params, H)
    np.testing.assert_allclose(merge_only, pf.merge_heads_without_transpose(heads) @ params["W_O"], rtol=1e-12)


def test_split_only_and_merge_only_are_right_for_one_head():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((N, 8))
    one = init_params(MHAConfig(8, 1), rng, dtype=np.float64)
    for fn in (pf.multi_head_attention_split_without_transpose, pf.multi_head_attention_merge_without_transpose):
        np.testing.assert_allclose(fn(x, one, 1), multi_head_attention(x, one, 1), rtol=1e-12, atol=1e-12)


def test_transposed_weights(layer):
    x, params = layer
    right = multi_head_attention(x, params, H)
    wrong = pf.multi_head_attention_transposed_weights(x, params, H)
    by_hand = pf.multi_head_attention_transposed_weights(x, {w: params[w].T for w in params}, H, transposed=())
    np.testing.assert_allclose(wrong, multi_head_attention(x, {w: params[w].T for w in params}, H), rtol=1e-12)
    np.testing.assert_allclose(by_hand, wrong, rtol=1e-12)
    assert not np.allclose(wrong, right)
    # symmetric weights: W.T = W, so the mistake cannot show
    sym = {w: (p + p.T) / 2 for w, p in params.items()}
    np.testing.assert_allclose(pf.multi_head_attention_transposed_weights(x, sym, H), multi_head_attention(x, sym, H),
                               rtol=1e-12)
    only_o = pf.multi_head_attention_transposed_weights(x, params, H, transposed=("W_O",))
    np.testing.assert_allclose(only_o, merge_heads(head_outputs(x, params, H)) @ params["W_O"].T, rtol=1e-12)


def test_transposed_weights_validate(layer):
    x, params = layer
    with pytest.raises(ValueError, match="transposed must name"):
        pf.multi_head_attention_transposed_weights(x, params, H, transposed=("W_X",))
    with pytest.raises(ValueError, match="W_K"):  # GQA's narrower W_K is refused, so every weight is square
        pf.multi_head_attention_transposed_weights(x, init_params(MHAConfig(H * D_K, H, 2), 0, dtype=np.float64), H)
    with pytest.raises(ValueError, match="no biases"):
        pf.multi_head_attention_split_without_transpose(x, init_params(MHAConfig(H * D_K, H, bias=True), 0), H)
