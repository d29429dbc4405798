"""Generate notebooks/02_shape_round_trip.ipynb (then execute it; see nbgen.py)."""

from nbgen import code, md, write

cells = [
    md(r"""
    # 02 · The shape round trip: $(N, d_{model})$ to heads and back

    **You will learn**
    - every intermediate shape of a multi-head attention layer, first for one sequence
      $(N, d_{model})$, then for a batch $(B, N, d_{model})$;
    - that splitting the width into heads is a reshape plus a transpose that copies nothing;
    - that the layer gives back exactly the shape it was given;
    - how badly "reshape without transpose" scrambles the heads, measured;
    - that one $(N, N)$ causal mask serves every sequence in the batch and every head.

    **Assumed:** notebook 01 (what one head owns). Symbols: $B$ batch, $N$ tokens, $d_{model}$
    width, $h$ heads, $d_k = d_{model}/h$.

    The sizes below are small and pairwise different ($B=3$, $N=5$, $d_{model}=24$, $h=4$, $d_k=6$),
    so every axis in a shape can be told apart at a glance.
    """),
    code("""
    import matplotlib.pyplot as plt
    import numpy as np
    from IPython.display import HTML, Image, display

    from mha_core import (
        MHAConfig,
        causal_mask,
        init_params,
        merge_heads,
        multi_head_attention,
        scaled_dot_product_attention,
        split_heads,
        trace_shapes,
    )
    from mha_core.ui.viz import draw_shape_boxes, figure_bytes, ledger_html

    B, N = 3, 5
    cfg = MHAConfig(d_model=24, n_heads=4)
    d_model, h, d_k = cfg.d_model, cfg.h, cfg.d_k
    assert len({B, N, d_model, h, d_k}) == 5  # all different, so no shape is ambiguous
    params = init_params(cfg, rng=0, dtype=np.float64)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((N, d_model))  # (N, d_model): one sequence
    print(f"B = {B}, N = {N}, d_model = {d_model}, h = {h}, d_k = {d_k}")
    """),
    md(r"""
    ## 1 · One sequence: the ledger

    `trace_shapes` runs the layer and records the shape of every step as it happens; the ledger
    below is that recording.
    """),
    code("""
    ledger = trace_shapes(X, params, h)
    display(HTML(ledger_html(ledger)))

    shapes = dict(ledger)
    assert shapes["Q as heads: reshape"] == (N, h, d_k)
    assert shapes["Q heads: transpose"] == (h, N, d_k)
    assert shapes["scores = Q K^T / sqrt(d_k)"] == (h, N, N)
    assert shapes["head outputs = weights V"] == (h, N, d_k)
    assert shapes["concat: reshape"] == (N, h * d_k) == (N, d_model)
    assert ledger[0] == ("X", (N, d_model)) and ledger[-1][1] == (N, d_model)
    """),
    md(r"""
    The same ledger as a picture: each tensor is a box whose width is its last axis and whose
    height is the axis before it; leading axes ($h$, later $B$) show as stacked copies.
    """),
    code("""
    display(Image(figure_bytes(draw_shape_boxes(ledger, title=f"One sequence: N = {N}, d_model = {d_model}, h = {h}"))))
    """),
    md(r"""
    ## 2 · The split copies nothing

    $Q = X W_Q$ has shape $(N, d_{model})$. Reading its width as $h$ blocks of $d_k$ is a reshape to
    $(N, h, d_k)$; moving the head axis to the front is a transpose to $(h, N, d_k)$. Both only
    change how the same memory is indexed.
    """),
    code("""
    Q = X @ params["W_Q"]  # (N, d_model)
    Q_heads = split_heads(Q, h)  # (h, N, d_k)
    assert Q_heads.shape == (h, N, d_k)
    assert np.shares_memory(Q_heads, Q)  # a view: zero bytes copied
    assert all(np.array_equal(Q_heads[i], Q[:, i * d_k : (i + 1) * d_k]) for i in range(h))

    back = merge_heads(Q_heads)  # (N, d_model)
    assert np.array_equal(back, Q)
    print(f"split_heads: {Q.shape} -> {Q_heads.shape}, shares memory with Q: "
          f"{np.shares_memory(Q_heads, Q)}")
    print(f"head i is exactly columns i*d_k:(i+1)*d_k of Q, for all {h} heads; merge undoes the split")
    """),
    md(r"""
    The merge after attention is different: the head outputs come out of a batched matmul as one
    $(h, N, d_k)$ block per head, and concatenating them must interleave the heads back along each
    token's row, which takes a copy.
    """),
    code("""
    heads_out, _ = scaled_dot_product_attention(Q_heads, split_heads(X @ params["W_K"], h),
                                                split_heads(X @ params["W_V"], h))  # (h, N, d_k)
    concat = merge_heads(heads_out)  # (N, h*d_k)
    assert heads_out.flags.c_contiguous and not np.shares_memory(concat, heads_out)
    out = concat @ params["W_O"]  # (N, d_model)
    assert np.allclose(out, multi_head_attention(X, params, h), rtol=0, atol=1e-12)
    print(f"head outputs {heads_out.shape} -> concat {concat.shape} (a copy) -> @ W_O {out.shape}")
    """),
    md(r"""
    ## 3 · The layer is shape-preserving

    Whatever the sizes, the output has the input's shape, so the result can be added back to the
    residual stream and layers can be stacked.
    """),
    code("""
    for d_model_i, h_i, n_i in ((24, 4, 5), (24, 24, 1), (64, 8, 17), (512, 8, 100)):
        p_i = init_params(MHAConfig(d_model_i, h_i), rng=0)
        x_i = np.random.default_rng(2).standard_normal((n_i, d_model_i)).astype(np.float32)
        y_i = multi_head_attention(x_i, p_i, h_i)  # (N, d_model)
        assert y_i.shape == x_i.shape and y_i.dtype == x_i.dtype
        print(f"d_model = {d_model_i:>3}, h = {h_i:>2}, N = {n_i:>3}: in {x_i.shape} -> out {y_i.shape}")
    """),
    md(r"""
    ## 4 · Add the batch axis $B$

    With $B$ sequences the input is $(B, N, d_{model})$. The heads go next to the batch axis,
    giving $(B, h, N, d_k)$: $B \cdot h$ independent attention problems, all done by the same
    batched matmuls.
    """),
    code("""
    X_batch = rng.standard_normal((B, N, d_model))  # (B, N, d_model)
    ledger_b = trace_shapes(X_batch, params, h)
    display(HTML(ledger_html(ledger_b)))

    shapes_b = dict(ledger_b)
    assert shapes_b["Q heads: transpose"] == (B, h, N, d_k)
    assert shapes_b["scores = Q K^T / sqrt(d_k)"] == (B, h, N, N)
    assert shapes_b["concat: reshape"] == (B, N, d_model)
    assert ledger_b[0][1] == ledger_b[-1][1] == (B, N, d_model)
    """),
    code("""
    display(Image(figure_bytes(draw_shape_boxes(ledger_b, title=f"A batch: B = {B}, N = {N}, d_model = {d_model}, h = {h}"))))
    """),
    md("Each sequence in the batch is processed on its own: the batched result equals running the layer once per sequence."),
    code("""
    out_batch = multi_head_attention(X_batch, params, h)  # (B, N, d_model)
    one_by_one = np.stack([multi_head_attention(X_batch[b], params, h) for b in range(B)])
    gap = np.abs(out_batch - one_by_one).max()
    assert out_batch.shape == X_batch.shape and gap < 1e-12
    print(f"batched {out_batch.shape} == {B} separate runs of {one_by_one.shape[1:]} (max gap < 1e-12)")
    """),
    md(r"""
    ## 5 · One causal mask for every batch item and every head

    The causal mask is a single $(N, N)$ boolean array (True = may attend). NumPy broadcasts it
    against scores of shape $(B, h, N, N)$, so every sequence and every head gets the same lower
    triangle.
    """),
    code("""
    mask = causal_mask(N)  # (N, N), True = may attend
    out_c, weights = multi_head_attention(X_batch, params, h, causal=True, return_weights=True)
    assert mask.shape == (N, N) and weights.shape == (B, h, N, N)
    assert np.broadcast_shapes(mask.shape, weights.shape) == weights.shape

    above = ~mask  # (N, N): the future
    for b in range(B):
        for i in range(h):
            assert np.all(weights[b, i][above] == 0.0)  # exactly zero above the diagonal
    assert np.allclose(weights.sum(axis=-1), 1.0)  # every row is still a distribution

    explicit = multi_head_attention(X_batch, params, h, mask=mask)  # the same mask passed by hand
    assert np.array_equal(explicit, out_c)
    print(f"mask {mask.shape} broadcast to weights {weights.shape}: "
          f"{int(above.sum())} future entries per map, all exactly 0 in all {B * h} maps")
    """),
    md(r"""
    ## 6 · "Reshape without transpose" scrambles the heads

    Reshaping $(N, d_{model})$ straight to $(h, N, d_k)$ gives the right shape, so nothing crashes,
    but it reads the numbers in memory order: "head 0" receives the first tokens' whole rows cut
    into pieces of $d_k$, instead of block 0 of every token. To see it, fill a matrix with the index of the token each entry came from.
    The wrong split is `mha_core.teaching.pitfalls.split_heads_without_transpose`.
    """),
    code("""
    from mha_core.teaching.pitfalls import split_heads_without_transpose

    token_of = np.repeat(np.arange(N, dtype=float)[:, None], d_model, axis=1)  # (N, d_model)
    right = split_heads(token_of, h)  # (h, N, d_k)
    wrong = split_heads_without_transpose(token_of, h)  # (h, N, d_k), same shape
    assert right.shape == wrong.shape == (h, N, d_k)

    # correct: row n of every head holds token n; wrong: most rows hold another token's numbers
    assert all(np.all(right[i, n] == n) for i in range(h) for n in range(N))
    wrong_rows = sum(bool(np.any(wrong[i, n] != n)) for i in range(h) for n in range(N))
    misplaced = np.mean(wrong != right)
    assert wrong_rows > h * N // 2
    print(f"head 0's rows come from tokens {[int(r[0]) for r in wrong[0]]} instead of {list(range(N))}")
    print(f"rows holding another token's numbers: {wrong_rows} of {h * N}; "
          f"entries from the wrong token: {misplaced:.0%}")
    """),
    code("""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), constrained_layout=True)
    for ax, split, title in ((axes[0], right, "split_heads (reshape + transpose)"),
                             (axes[1], wrong, "reshape without transpose")):
        im = ax.imshow(split[0], cmap="viridis", vmin=0, vmax=N - 1, interpolation="nearest")
        ax.set(title=f"head 0: {title}", xlabel="d_k (feature within head)", ylabel="row (should be token)")
    fig.colorbar(im, ax=axes, label="token the value came from")
    fig.suptitle(f"Which token feeds head 0?  (N = {N}, d_model = {d_model}, h = {h})")
    plt.show()
    """),
    md(r"""
    Through the whole layer the damage is large. `mha_core.teaching.pitfalls` has the layer built with the
    wrong split on $Q$, $K$ and $V$ and the matching wrong merge; compare it with the real layer.
    """),
    code("""
    from mha_core.teaching.pitfalls import multi_head_attention_without_transpose

    good = multi_head_attention(X, params, h)  # (N, d_model)
    bad = multi_head_attention_without_transpose(X, params, h)  # (N, d_model), the same shape
    err = np.abs(bad - good)
    rel = np.linalg.norm(bad - good) / np.linalg.norm(good)
    frac = np.mean(err > 1e-6)
    assert rel > 0.1 and frac > 0.9
    print(f"max |error| = {err.max():.3f} (typical |output| {np.abs(good).mean():.3f}); "
          f"relative error {rel:.0%}; entries off by > 1e-6: {frac:.0%}")
    """),
    md(r"""
    ## 7 · Exercise: write `split_heads`

    `check_split_heads` runs your function on seeded inputs with and without a batch axis and names
    the mistake when it recognises one. A first attempt reshapes straight to the head layout:
    """),
    code("""
    from mha_core.teaching.exercises import check_split_heads


    def split_try1(x, n_heads):
        *lead, n, width = x.shape
        return x.reshape(*lead, n_heads, n, width // n_heads)  # (..., h, N, d_k) -- in memory order


    attempt = check_split_heads(split_try1)
    assert not attempt.ok and attempt.pitfall == "split_without_transpose"
    attempt
    """),
    code("""
    def split_try2(x, n_heads):
        *lead, n, width = x.shape
        x = x.reshape(*lead, n, n_heads, width // n_heads)  # (..., N, h, d_k)
        return np.swapaxes(x, -3, -2)  # (..., h, N, d_k)


    attempt = check_split_heads(split_try2)
    assert attempt.ok
    attempt
    """),
    md(r"""
    ## 8 · Explore: sliders for $B$, $N$, $d_{model}$ and $h$

    The panel below is the dashboard's shape explorer (`mha_core.ui.widgets.shape_explorer`). Each
    move runs the real layer through `trace_shapes` and redraws the ledger and the boxes. The $h$
    slider only offers divisors of $d_{model}$, because the heads must split the width evenly.
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    from mha_core.ui.widgets import shape_explorer

    shape_explorer(B=B, N=N, d_model=64, h=h)
    """),
    md(r"""
    The same panel, driven from code instead of the mouse, to check what it promises: the choices
    of $h$ follow $d_{model}$, its ledger is the `trace_shapes` recording, and a value that does not
    divide $d_{model}$ (as a forged browser message could send) gets a readable message, not a
    traceback.
    """),
    code("""
    import html
    import re

    from mha_core.ui.widgets import shape_state

    probe = shape_explorer(B=B, N=N, d_model=512, h=8)
    for width in (768, 64):
        probe.d_model.value = width
        assert all(width % k == 0 for k in probe.h.options) and probe.h.value in probe.h.options
        print(f"d_model = {width:>3}: h offers {list(probe.h.options)}")

    panel_ledger = shape_state(B, N, 64, 4)["steps"]
    assert panel_ledger == trace_shapes(np.zeros((B, N, 64), np.float32), init_params(MHAConfig(64, 4), 0), 4)

    assert probe.refresh(h=5) is False  # refused, the previous figures stay
    message = html.unescape(re.sub(r"<[^>]+>", "", probe.status.value))  # the status line as text
    assert "does not divide" in message
    print(f"h = 5 with d_model = 64 -> {message}")
    """),
    md(r"""
    ## Recap

    - $(N, d_{model}) \to$ Q, K, V $(N, d_{model}) \to$ reshape $(N, h, d_k) \to$ transpose
      $(h, N, d_k) \to$ scores $(h, N, N) \to$ head outputs $(h, N, d_k) \to$ transpose and merge
      $(N, d_{model}) \to W_O \to (N, d_{model})$; with a batch every tensor gains a leading $B$.
    - The split is a view (no copy); merging the attention output back copies once.
    - $h$ must divide $d_{model}$: the explorer only offers divisors and refuses anything else
      with a message.
    - The output shape equals the input shape, for every size tried.
    - One $(N, N)$ causal mask broadcasts over $B$ and $h$: every future weight is exactly 0.
    - Reshape without transpose keeps the shape and scrambles the values: most head rows hold
      another token's numbers and every output entry is wrong.

    Next: `03_worked_example` counts the parameters and multiply-accumulates of these steps.
    """),
]

if __name__ == "__main__":
    write("02_shape_round_trip.ipynb", [c for c in cells if not isinstance(c, str)])
