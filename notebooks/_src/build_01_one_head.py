"""Generate notebooks/01_one_head.ipynb (then execute it; see nbgen.py)."""

from nbgen import code, md, write

cells = [
    md(r"""
    # 01 · One attention head: what it owns and what it produces

    **You will learn**
    - which three weight matrices a single head owns, and their shapes at a real model size
      ($d_{model}=4096$, $h=32$, so $d_k=128$);
    - that one head turns $N$ tokens into an output of shape $(N, d_k)$;
    - that the packed matrix $W_Q$ of shape $(d_{model}, h\,d_k)$ is just the heads' matrices
      side by side, so slicing it reproduces the per-head computation;
    - that heads never exchange information inside attention: only $W_O$ mixes them.

    **Assumed:** matrix products and the softmax; the package `mha_core` is installed
    (`pip install -e .`). Symbols: $N$ tokens, $d_{model}$ width, $h$ heads, $d_k = d_v = d_{model}/h$.
    """),
    code("""
    import matplotlib.pyplot as plt
    import numpy as np

    from mha_core import (
        MHAConfig,
        count_params,
        head_contributions,
        head_outputs,
        init_params,
        merge_heads,
        multi_head_attention,
        multi_head_attention_per_head,
        scaled_dot_product_attention,
    )
    """),
    md(r"""
    ## 1 · The large example, described rather than allocated

    A layer with $d_{model}=4096$ and $h=32$ heads has four $4096 \times 4096$ matrices. We do not
    need them in memory to know what each head owns: the configuration and the parameter counter
    are enough.
    """),
    code("""
    big = MHAConfig(d_model=4096, n_heads=32)
    assert big.d_k == big.d_model // big.h == 128

    counts = count_params(big)
    for name in ("W_Q", "W_K", "W_V"):
        per_head = counts[name] // big.h  # the packed matrix, shared out evenly over h heads
        assert per_head == big.d_model * big.d_k
        print(f"{name}^h : shape ({big.d_model:,}, {big.d_k}) = {per_head:,} weights per head")

    owned = 3 * (counts["W_Q"] // big.h)
    assert owned == 1_572_864
    print(f"one head owns {owned:,} weights; the shared W_O has {counts['W_O']:,}")
    assert owned * big.h == counts["W_Q"] + counts["W_K"] + counts["W_V"]
    """),
    md(r"""
    To see the *slice* itself without 64 MiB of memory, describe $W_Q$ lazily: `np.broadcast_to`
    makes an array of the right shape whose every entry is one shared float (both strides are 0).
    Head $i$ owns the columns $i\,d_k$ to $(i+1)\,d_k$.
    """),
    code("""
    W_Q_lazy = np.broadcast_to(np.float32(0.0), (big.d_model, big.h * big.d_k))  # (d_model, h*d_k)
    assert W_Q_lazy.strides == (0, 0)  # no real storage behind the shape

    i = 5
    W_Q_head = W_Q_lazy[:, i * big.d_k : (i + 1) * big.d_k]  # (d_model, d_k)
    assert W_Q_head.shape == (4096, 128)
    full_bytes = counts["W_Q"] * np.dtype(np.float32).itemsize
    print(f"W_Q^{i} has shape {W_Q_head.shape}; the real float32 W_Q would take {full_bytes:,} bytes")
    """),
    md(r"""
    ## 2 · One head's output is $(N, d_k)$

    Running a single head needs only that head's three slices, $3 \times 4096 \times 128$ floats,
    not the whole layer. Here are six tokens through head 5 at full width.
    """),
    code("""
    rng = np.random.default_rng(0)
    N = 6
    X_big = rng.standard_normal((N, big.d_model)).astype(np.float32)  # (N, d_model)
    W_Q5, W_K5, W_V5 = (
        (rng.standard_normal((big.d_model, big.d_k)) / np.sqrt(big.d_model)).astype(np.float32)
        for _ in range(3)
    )  # each (d_model, d_k)

    Q5, K5, V5 = X_big @ W_Q5, X_big @ W_K5, X_big @ W_V5  # each (N, d_k)
    out5, weights5 = scaled_dot_product_attention(Q5, K5, V5)  # (N, d_k), (N, N)
    assert Q5.shape == K5.shape == V5.shape == (N, big.d_k)
    assert out5.shape == (N, big.d_k) and weights5.shape == (N, N)

    head_bytes = 3 * W_Q5.nbytes
    layer_bytes = counts["total"] * np.dtype(np.float32).itemsize
    print(f"head output: {out5.shape} (N, d_k); weights: {weights5.shape} (N, N)")
    print(f"memory for this head's weights: {head_bytes:,} bytes vs {layer_bytes:,} for the layer")
    """),
    md(r"""
    ## 3 · Packed $W_Q$ = the heads' matrices side by side

    Implementations store one $W_Q$ of shape $(d_{model}, h\,d_k)$ and do one matmul for all heads.
    From here on a small layer ($d_{model}=64$, $h=4$, $d_k=16$) in float64 keeps every
    comparison tight (agreement to $10^{-12}$).
    """),
    code("""
    from functools import partial

    from mha_core import head_columns

    small = MHAConfig(d_model=64, n_heads=4)
    h, d_k = small.h, small.d_k
    params = init_params(small, rng=0, dtype=np.float64)
    X = np.random.default_rng(1).standard_normal((10, small.d_model))  # (N, d_model)
    head_cols = partial(head_columns, d=d_k)  # head_cols(i): head i's columns of a packed (d_model, h*d_k) matrix

    W_Q = params["W_Q"]  # (d_model, h*d_k)
    assert W_Q.shape == (small.d_model, h * d_k)
    assert all(np.shares_memory(W_Q[:, head_cols(i)], W_Q) for i in range(h))  # slices are views

    Q_packed = X @ W_Q  # (N, h*d_k), every head's queries at once
    gap = max(np.abs(Q_packed[:, head_cols(i)] - X @ W_Q[:, head_cols(i)]).max() for i in range(h))
    assert gap < 1e-12
    print(f"(X W_Q)[:, head i] matches X W_Q^i for all {h} heads (max gap < 1e-12)")
    """),
    md(r"""
    The same holds for the whole head: the fused layer's head outputs (`head_outputs`) equal what each
    head computes alone from its three column slices, and the fused layer equals the explicit loop
    over heads (`multi_head_attention_per_head`).
    """),
    code("""
    fused_heads = head_outputs(X, params, h)  # (h, N, d_k)
    assert fused_heads.shape == (h, 10, d_k)

    gaps = []
    for i in range(h):
        c = head_cols(i)
        alone, _ = scaled_dot_product_attention(
            X @ params["W_Q"][:, c], X @ params["W_K"][:, c], X @ params["W_V"][:, c]
        )  # (N, d_k)
        gaps.append(np.abs(alone - fused_heads[i]).max())
    assert max(gaps) < 1e-12

    fused = multi_head_attention(X, params, h)  # (N, d_model)
    looped = multi_head_attention_per_head(X, params, h)  # (N, d_model)
    loop_gap = np.abs(fused - looped).max()
    assert loop_gap < 1e-12
    print(f"each head alone from its slices == fused head_outputs (max gap < 1e-12, {h} heads)")
    print(f"fused layer == loop over heads (max gap < 1e-12), output shape {fused.shape}")
    """),
    md(r"""
    After attention, the heads are concatenated along the width (head $i$ fills columns
    $i\,d_k$ to $(i+1)\,d_k$) and one **shared** $W_O$ of shape $(d_{model}, d_{model})$ maps the
    result back to the residual stream.
    """),
    code("""
    concat = merge_heads(fused_heads)  # (h, N, d_k) -> (N, h*d_k)
    assert concat.shape == (10, small.d_model)
    assert all(np.array_equal(concat[:, head_cols(i)], fused_heads[i]) for i in range(h))
    assert params["W_O"].shape == (small.d_model, small.d_model)
    concat_gap = np.abs(concat @ params["W_O"] - fused).max()  # (N, d_model)
    assert concat_gap < 1e-12
    print(f"concat {concat.shape} @ W_O {params['W_O'].shape} == layer output (max gap < 1e-12)")
    """),
    md(r"""
    Read $W_O$ as $h$ row blocks $W_O^i$ of shape $(d_k, d_{model})$ and the same product becomes a
    sum: each head writes its own contribution $\text{head}_i W_O^i$ into the full width, and the
    layer's output is the sum of the $h$ contributions (`head_contributions`).
    """),
    code("""
    contributions = head_contributions(X, params, h)  # (h, N, d_model)
    assert contributions.shape == (h, 10, small.d_model)
    sum_gap = np.abs(contributions.sum(axis=0) - fused).max()
    assert sum_gap < 1e-12
    print(f"sum over {h} heads of head_i @ W_O^i {contributions.shape[1:]} == layer output (max gap < 1e-12)")
    """),
    md(r"""
    ## 4 · Heads never talk inside attention

    Change every weight that head 2 owns ($W_Q^2, W_K^2, W_V^2$) and run the layer again. The other
    heads' outputs do not move by a single bit; the final output, after $W_O$, changes everywhere,
    because $W_O$ is where heads mix.
    """),
    code("""
    changed_head = 2
    perturbed = {name: w.copy() for name, w in params.items()}
    noise = np.random.default_rng(2)
    for name in ("W_Q", "W_K", "W_V"):
        perturbed[name][:, head_cols(changed_head)] += noise.standard_normal((small.d_model, d_k))

    new_heads = head_outputs(X, perturbed, h)  # (h, N, d_k)
    for i in range(h):
        same = np.array_equal(new_heads[i], fused_heads[i])  # bit-for-bit
        assert same == (i != changed_head)
        print(f"head {i}: output {'unchanged (bit-for-bit)' if same else 'changed'}")

    new_out = multi_head_attention(X, perturbed, h)  # (N, d_model)
    frac_out = np.mean(new_out != fused)
    assert frac_out == 1.0
    print(f"final output: {frac_out:.0%} of its {fused.size:,} entries changed")
    """),
    md(r"""
    Replace $W_O$ by the identity ("no mixing") and the change stays inside head 2's block of
    columns; with the real $W_O$ it spreads to every column.
    """),
    code("""
    no_mix = {**params, "W_O": np.eye(small.d_model)}
    no_mix_perturbed = {**perturbed, "W_O": np.eye(small.d_model)}
    delta_no_mix = multi_head_attention(X, no_mix_perturbed, h) != multi_head_attention(X, no_mix, h)
    delta_mixed = new_out != fused  # (N, d_model) bool

    cols_no_mix = np.flatnonzero(delta_no_mix.any(axis=0))
    assert np.array_equal(cols_no_mix, np.arange(small.d_model)[head_cols(changed_head)])
    assert delta_mixed.all(axis=0).all()
    print(f"without W_O: changed columns {cols_no_mix.min()}..{cols_no_mix.max()} (head 2's block)")
    print(f"with W_O:    changed columns {int(delta_mixed.any(axis=0).sum())} of {small.d_model}")
    """),
    code("""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), constrained_layout=True)
    for ax, delta, title in (
        (axes[0], delta_no_mix, "W_O = identity: change stays in head 2's columns"),
        (axes[1], delta_mixed, "real W_O: change reaches every column"),
    ):
        im = ax.imshow(delta, cmap="cividis", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.set(title=title, xlabel="output column (of d_model)", ylabel="token (of N)")
    fig.colorbar(im, ax=axes, label="entry changed (1) or not (0)")
    fig.suptitle("Perturbing head 2's W_Q, W_K, W_V: where the output moves")
    plt.show()
    """),
    md(r"""
    ## 5 · Exercise: the scale and the head's attention

    The checkers in `mha_core.teaching.exercises` run your answer on seeded inputs, compare it with
    `mha_core`, and name the mistake when your answer matches a known wrong one.

    **(a)** The logits $QK^\top$ are multiplied by a scale before the softmax. For the large layer
    ($d_{model}=4096$, $h=32$), a first attempt uses the model width:
    """),
    code("""
    from mha_core.teaching.exercises import check_attention, check_scale

    attempt = check_scale(1 / np.sqrt(big.d_model), d_model=big.d_model, n_heads=big.h)
    assert not attempt.ok and attempt.pitfall == "scale_sqrt_d_model"
    attempt
    """),
    md("The dot products inside one head sum over $d_k$ terms, so the head's own width sets the scale:"),
    code("""
    attempt = check_scale(1 / np.sqrt(big.d_k), d_model=big.d_model, n_heads=big.h)
    assert attempt.ok
    attempt
    """),
    md(r"""
    **(b)** Write one head's attention, `attention(q, k, v, mask=None)`, with `softmax` from
    `mha_core` (its `mask` argument takes True = may attend). A first attempt forgets the scale:
    """),
    code("""
    from mha_core import softmax


    def attention_try1(q, k, v, mask=None):
        scores = q @ np.swapaxes(k, -1, -2)  # (..., N_q, N_k)
        return softmax(scores, axis=-1, mask=mask) @ v  # (..., N_q, d_v)


    attempt = check_attention(attention_try1)
    assert not attempt.ok and attempt.pitfall == "scale_missing"
    attempt
    """),
    code("""
    def attention_try2(q, k, v, mask=None):
        scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., N_q, N_k), / sqrt(d_k)
        return softmax(scores, axis=-1, mask=mask) @ v  # (..., N_q, d_v)


    attempt = check_attention(attention_try2)
    assert attempt.ok
    attempt
    """),
    md(r"""
    ## Recap

    - A head owns $W_Q^h, W_K^h, W_V^h$, each $(d_{model}, d_k)$: $(4096, 128)$ at $d_{model}=4096$,
      $h=32$, i.e. 1,572,864 weights per head; $W_O$ is shared by all heads.
    - A head maps $(N, d_{model})$ to $(N, d_k)$ through its own softmax.
    - The packed $W_Q$ is the per-head matrices side by side; its column slices reproduce the
      per-head computation, and the fused layer equals the loop over heads.
    - Concat then $W_O$ is the same as summing each head's contribution $\text{head}_i W_O^i$.
    - Heads are independent inside attention (other heads bit-for-bit unchanged); only $W_O$ mixes
      them.
    - The logits are scaled by $1/\sqrt{d_k}$, the head's width, not $1/\sqrt{d_{model}}$.

    Next: `02_shape_round_trip` follows every shape from $(N, d_{model})$ to heads and back.
    """),
]

if __name__ == "__main__":
    write("01_one_head.ipynb", cells)
