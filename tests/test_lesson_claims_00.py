"""Notebook 00 (the on-ramp): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

import numpy as np
from lesson_claims import Claims

NB = "00_on_ramp.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    "A query **scores** every key by the **dot product** $q \\cdot k_j$: large when the two vectors "
    "point the same way.",
    after="scores = K @ q",
)
def dot_product_ranks_sat_first(words, scores):
    assert words[scores.argmax()] == "sat"


@CLAIMS(
    "all positive, summing to 1, the largest score getting the largest weight",
    after="weights = softmax(scores)",
)
def softmax_weights_positive_sum_to_1(weights, scores):
    assert np.isclose(weights.sum(), 1.0)
    assert (weights > 0).all()
    assert weights.argmax() == scores.argmax()


@CLAIMS(
    "The answer of the lookup is the **weighted average of the values**, $\\sum_j a_j v_j$",
    after="weights = softmax(scores)",
)
def answer_is_weighted_average_of_values(answer, weights, V):
    assert np.allclose(answer, sum(a * v for a, v in zip(weights, V, strict=True)))


@CLAIMS(
    "Here the key of \"on\" happens to resemble the query too, so it takes almost as large a share "
    "as \"sat\": the lookup is soft.",
    after="weights = softmax(scores)",
)
def on_takes_almost_as_large_a_share(weights, words):
    assert sorted(weights)[-2] == weights[words.index('on')]
    assert weights.max() < 0.5


@CLAIMS(
    "and $\\infty / \\infty$ is NaN. Since $\\mathrm{softmax}(s) = \\mathrm{softmax}(s - c)$ for any "
    "constant $c$, subtracting each row's maximum first changes nothing but the overflow.",
    after="large = np.array([1000.0, 1001.0])",
)
def naive_softmax_overflows_stable_does_not(naive, stable, softmax, large):
    assert np.isnan(naive).all()
    assert np.allclose(stable, softmax(large - large.max()))


@CLAIMS(
    "a softmax over each row (over the keys), and the weights times $V$",
    after="logits = Q @ K.T / np.sqrt(d_k)",
)
def attention_rows_sum_to_1_and_match_reference(A, out, ref):
    assert np.allclose(A.sum(axis=-1), 1.0)
    assert np.allclose(out, ref)


@CLAIMS(
    "so its **variance grows like $d_k$**",
    after="var_raw, var_scaled, top_raw, top_scaled = [], [], [], []",
)
def raw_score_variance_grows_like_d_k(var_raw, d_ks):
    assert all(0.8 < v / d < 1.2 for v, d in zip(var_raw, d_ks, strict=True))


@CLAIMS(
    "Dividing by $\\sqrt{d_k}$ brings the variance back to 1 for every $d_k$.",
    after="var_raw, var_scaled, top_raw, top_scaled = [], [], [], []",
)
def scaled_score_variance_is_1(var_scaled):
    assert all(0.8 < v < 1.2 for v in var_scaled)


@CLAIMS(
    "a softmax of huge logits puts almost all the weight on one key (it *saturates*)",
    after="var_raw, var_scaled, top_raw, top_scaled = [], [], [], []",
)
def huge_logits_saturate_the_softmax(top_raw, top_scaled):
    assert top_raw[-1] > 0.9 > 0.5 > max(top_scaled)


@CLAIMS(
    "So \"dog bites man\" and \"man bites dog\" give *dog* the very same output.",
    after="d_model = 8",
)
def word_order_is_invisible_without_positions(dog_1, dog_2):
    assert np.abs(dog_1 - dog_2).max() < 1e-12


@CLAIMS(
    "Now the same word at two positions enters the layer as two different vectors.",
    after="P = positional_encoding(3, d_model)",
)
def positions_make_the_same_word_differ(gap):
    assert gap > 0.1


@CLAIMS(
    "the blocked logits become $-\\infty$ before the softmax, so their weights are exactly 0.",
    after="mask = causal_mask(N)",
)
def masked_weights_are_exactly_0(A_m, mask):
    assert (A_m[~mask] == 0).all()
    assert np.allclose(A_m.sum(axis=-1), 1.0)


@CLAIMS(
    "query $i$ may read keys $j \\le i$ only",
    after="mask = causal_mask(N)",
)
def causal_query_ignores_later_keys(out_2, out_m):
    assert np.array_equal(out_2[:-1], out_m[:-1])


@CLAIMS(
    "Because every part adds to the stream, attention must return exactly the shape it was given, "
    "$(N, d_{model})$.",
    after="cfg = MHAConfig(d_model=16, n_heads=4)",
)
def attention_returns_the_input_shape(x_next, x):
    assert x_next.shape == x.shape


# section 9: the loss one head suffers when two values share a subspace
@CLAIMS(
    "that blend is the same whichever word sat where: $\\tfrac12(a + b) = \\tfrac12(b + a)$.",
    after="one_head_w = softmax",
)
def one_head_blend_ignores_order(one_head_w, one_1, one_2):
    assert np.allclose(one_head_w, 0.5)
    assert np.array_equal(one_1, one_2)


@CLAIMS(
    "Two heads can each take one position and hand over $a$ and $b$ separately",
    after="one_head_w = softmax",
)
def two_heads_hand_over_a_and_b(a_1, word, b_1, a_2, b_2):
    assert np.allclose(a_1, word['cat'], atol=1e-3)
    assert np.allclose(b_1, word['dog'], atol=1e-3)
    assert np.allclose(a_2, word['dog'], atol=1e-3)
    assert np.allclose(b_2, word['cat'], atol=1e-3)


@CLAIMS(
    "while each of the two heads still knows which word it found",
    after="one_head_w = softmax",
)
def two_heads_tell_the_orders_apart(a_1, a_2, b_1, b_2):
    assert np.abs(a_1 - a_2).max() > 0.5
    assert np.abs(b_1 - b_2).max() > 0.5


# facts the prose states about floats and about other notebooks' files
@CLAIMS(
    r"(the largest is about $1.8 \times 10^{308}$, so $e^x$ overflows above $x \approx 709$)",
    after="large = np.array([1000.0, 1001.0])",
)
def float64_max_and_exp_overflow():
    assert round(np.finfo(np.float64).max / 1e308, 1) == 1.8
    assert int(np.log(np.finfo(np.float64).max)) == 709


@CLAIMS(
    r"| fp16 | 16-bit floats, 2 bytes a number |",
    after="d_model = 8",
)
def fp16_is_2_bytes():
    assert np.dtype(np.float16).itemsize == 2


@CLAIMS(
    r"(notebook 08 takes the first step at which the training loss, averaged over 20 steps, is below 0.01)",
    after="d_model = 8",
)
def notebook_08_converges_below_0_01_over_20_steps():
    import inspect

    from mha_core.training.trainer import converged_step

    defaults = inspect.signature(converged_step).parameters
    assert [defaults[k].default for k in ('threshold', 'window')] == [0.01, 20]


@CLAIMS(
    r"Q4_1 keeps 4 bits per weight plus one scale and one offset per block of 32 weights",
    after="d_model = 8",
)
def q4_1_keeps_4_bits_per_weight_scale_offset():
    import gguf

    # a block: 32 weights in 20 bytes = 32 x 4 bits + a 2-byte scale + a 2-byte offset
    assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q4_1] == (32, 32 * 4 // 8 + 2 + 2)


@CLAIMS(
    "it lies between them, nearer to both than to any other value.",
    after="answer = weights @ V",
)
def answer_nearer_to_sat_and_on(answer, V):
    distances = np.linalg.norm(answer - V, axis=-1)  # (N,)
    assert max(distances[2], distances[3]) < min(distances[j] for j in (0, 1, 4, 5))
    assert ((np.minimum(V[2], V[3]) <= answer) & (answer <= np.maximum(V[2], V[3]))).all()  # between them


@CLAIMS(
    "With unequal weights $p$ and $1-p$ the two orders give different blends, but still one blend",
    after="one_head_w = softmax(np.array([5.0, 5.0]))",
)
def uneven_split_tells_the_orders_apart(word, softmax, one_head_w):
    assert np.allclose(one_head_w, [0.5, 0.5])  # the toy's split is the even one
    p = softmax(np.array([5.0, 4.0]))  # an uneven split
    a, b = word["cat"], word["dog"]
    assert not np.allclose(p[0] * a + p[1] * b, p[0] * b + p[1] * a)


@CLAIMS(
    "Entry $2i$ is $\\sin(p / 10000^{2i/d_{model}})$ and entry $2i+1$ is $\\cos(p / 10000^{2i/d_{model}})$",
    after="P = positional_encoding(3, d_model)",
)
def positional_encoding_formula(positional_encoding):
    pe = positional_encoding(40, 32)  # (N, d_model), the heatmap's
    p, i = np.arange(40)[:, None], np.arange(16)
    assert np.allclose(pe[:, 0::2], np.sin(p / 10000 ** (2 * i / 32)))
    assert np.allclose(pe[:, 1::2], np.cos(p / 10000 ** (2 * i / 32)))
    assert np.abs(pe[:, -2]).max() < 0.1 and pe[:, -1].min() > 0.99  # the slow rows: near 0 and near 1


@CLAIMS(
    "the sum still lies nearest to its own word's vector, so the word is not lost",
    after="P = positional_encoding(3, d_model)",
)
def word_survives_the_position(nearest):
    assert nearest == [0, 1, 2]


test_quotes, test_claim = CLAIMS.tests()
