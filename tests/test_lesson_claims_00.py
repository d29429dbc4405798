"""Notebook 00 (the on-ramp): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

from lesson_claims import Claim, claim_tests

NB = "00_on_ramp.ipynb"
CLAIMS = [
    Claim("A query scores every key by the **dot product** $q \\cdot k_j$: large when the two vectors "
          "point the same way.",
          "scores = K @ q", 'words[scores.argmax()] == "sat"'),
    Claim("all positive, summing to 1, the largest score getting the largest weight",
          "weights = softmax(scores)",
          "np.isclose(weights.sum(), 1.0) and (weights > 0).all() and weights.argmax() == scores.argmax()"),
    Claim("The answer of the lookup is the **weighted average of the values**, $\\sum_j a_j v_j$",
          "weights = softmax(scores)",
          "np.allclose(answer, sum(a * v for a, v in zip(weights, V, strict=True)))"),
    Claim("Here the key of \"on\" happens to resemble the query too, so it takes almost as large a share "
          "as \"sat\": the lookup is soft.",
          "weights = softmax(scores)",
          "sorted(weights)[-2] == weights[words.index('on')] and weights.max() < 0.5"),
    Claim("and $\\infty / \\infty$ is NaN. Since $\\mathrm{softmax}(s) = \\mathrm{softmax}(s - c)$ for any "
          "constant $c$, subtracting each row's maximum first changes nothing but the overflow.",
          "large = np.array([1000.0, 1001.0])",
          "np.isnan(naive).all() and np.allclose(stable, softmax(large - large.max()))"),
    Claim("a softmax over each row (over the keys), and the weights times $V$",
          "logits = Q @ K.T / np.sqrt(d_k)", "np.allclose(A.sum(axis=-1), 1.0) and np.allclose(out, ref)"),
    Claim("so its **variance grows like $d_k$**",
          "var_raw, var_scaled, top_raw, top_scaled = [], [], [], []",
          "all(0.8 < v / d < 1.2 for v, d in zip(var_raw, d_ks, strict=True))"),
    Claim("Dividing by $\\sqrt{d_k}$ brings the variance back to 1 for every $d_k$.",
          "var_raw, var_scaled, top_raw, top_scaled = [], [], [], []",
          "all(0.8 < v < 1.2 for v in var_scaled)"),
    Claim("a softmax of huge logits puts almost all the weight on one key (it *saturates*)",
          "var_raw, var_scaled, top_raw, top_scaled = [], [], [], []",
          "top_raw[-1] > 0.9 > 0.5 > max(top_scaled)"),
    Claim("So \"dog bites man\" and \"man bites dog\" give *dog* the very same output.",
          "d_model = 8", "np.abs(dog_1 - dog_2).max() < 1e-12"),
    Claim("Now the same word at two positions enters the layer as two different vectors.",
          "P = positional_encoding(3, d_model)", "gap > 0.1"),
    Claim("the blocked logits become $-\\infty$ before the softmax, so their weights are exactly 0.",
          "mask = causal_mask(N)", "(A_m[~mask] == 0).all() and np.allclose(A_m.sum(axis=-1), 1.0)"),
    Claim("query $i$ may read keys $j \\le i$ only",
          "mask = causal_mask(N)", "np.array_equal(out_2[:-1], out_m[:-1])"),
    Claim("Because every layer adds to the stream, attention must return exactly the shape it was given, "
          "$(N, d_{model})$.",
          "cfg = MHAConfig(d_model=16, n_heads=4)", "x_next.shape == x.shape"),
    # section 9: the loss one head suffers when two values share a subspace
    Claim("that blend is the same whichever word sat where: $\\tfrac12(a + b) = \\tfrac12(b + a)$.",
          "one_head_w = softmax", "np.allclose(one_head_w, 0.5) and np.array_equal(one_1, one_2)"),
    Claim("Two heads can each take one position and hand over $a$ and $b$ separately",
          "one_head_w = softmax",
          "np.allclose(a_1, word['cat'], atol=1e-3) and np.allclose(b_1, word['dog'], atol=1e-3)"
          " and np.allclose(a_2, word['dog'], atol=1e-3) and np.allclose(b_2, word['cat'], atol=1e-3)"),
    Claim("while each of the two heads still knows which word it found",
          "one_head_w = softmax", "np.abs(a_1 - a_2).max() > 0.5 and np.abs(b_1 - b_2).max() > 0.5"),
    # facts the prose states about floats and about other notebooks' files
    Claim(r"(the largest is about $1.8 \times 10^{308}$, so $e^x$ overflows above $x \approx 709$)",
          "large = np.array([1000.0, 1001.0])",
          "round(np.finfo(np.float64).max / 1e308, 1) == 1.8 and int(np.log(np.finfo(np.float64).max)) == 709"),
    Claim(r"| fp16 | 16-bit floats, 2 bytes a number |", "d_model = 8", "np.dtype(np.float16).itemsize == 2"),
    Claim(r"(notebook 08 takes the first step at which the training loss, averaged over 20 steps, is below 0.01)",
          "d_model = 8",
          "[__import__('inspect').signature(__import__('mha_core.training.trainer', fromlist=['t']).converged_step)"
          ".parameters[k].default for k in ('threshold', 'window')] == [0.01, 20]"),
    Claim(r"Q4_1 keeps 4 bits per weight plus one scale and one offset per block of 32 weights",
          "d_model = 8",  # a block: 32 weights in 20 bytes = 32 x 4 bits + a 2-byte scale + a 2-byte offset
          "__import__('gguf').GGML_QUANT_SIZES[__import__('gguf').GGMLQuantizationType.Q4_1] == (32, 32 * 4 // 8 + 2 + 2)"),
]

test_quotes, test_claim = claim_tests(NB, CLAIMS)
