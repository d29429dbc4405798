"""Generate notebooks/04_head_heatmaps.ipynb (then execute it; see nbgen.py)."""

from nbgen import code, md, write

cells = [
    md(r"""
    # 04 · Per-head attention heatmaps on a real sentence

    **You will learn**
    - how to read an attention map: one row per query token, one column per key token, shape
      $(N, N)$ per head and $(h, N, N)$ for the layer;
    - that every row is a probability distribution (it sums to 1);
    - that the causal mask makes every weight above the diagonal exactly 0, for every head and
      every sequence of a batch;
    - how to explore the maps with sliders for $h$ and $N$, a causal toggle and a query selector.

    **Assumed:** notebooks 01 and 02. The weights here are **random** (an untrained layer): the maps
    show the mechanics, not learned linguistic roles. Symbols: $B$, $N$, $d_{model}$, $h$, $d_k$.
    """),
    code("""
    import numpy as np
    from IPython.display import Image, display

    from mha_core import MHAConfig, causal_mask, init_params, multi_head_attention
    from mha_core.teaching.demo import SENTENCE, embed_tokens
    from mha_core.ui.viz import figure_bytes, head_grid_figure

    tokens = list(SENTENCE)
    N = len(tokens)
    cfg = MHAConfig(d_model=64, n_heads=8)
    h = cfg.h
    X = embed_tokens(tokens, cfg.d_model, seed=0)  # (N, d_model), token + position embedding
    params = init_params(cfg, rng=0)  # float32, random (untrained)
    assert X.shape == (N, cfg.d_model) and X.dtype == params["W_Q"].dtype
    print(f"{N} tokens: {' '.join(tokens)}")
    print(f"d_model = {cfg.d_model}, h = {h}, d_k = {cfg.d_k}")
    """),
    md(r"""
    ## 1 · One map per head, every row a distribution
    """),
    code("""
    _, weights = multi_head_attention(X, params, h, return_weights=True)  # (h, N, N)
    assert weights.shape == (h, N, N)
    assert np.all(weights >= 0)
    row_sums = weights.sum(axis=-1)  # (h, N)
    assert np.allclose(row_sums, 1.0, atol=1e-5)
    print(f"weights {weights.shape}: all {row_sums.size} rows (h x N) sum to 1 within 1e-5")
    """),
    md(r"""
    Pick a query token and read its row in every head: each head spreads its attention
    differently over the same sentence. (With trained weights these rows would show roles such as
    "previous token" or "pronoun to noun"; here they are random.)
    """),
    code("""
    query = tokens.index("it")  # the first "it"
    for i in range(h):
        row = weights[i, query]  # (N,)
        top = int(np.argmax(row))
        print(f"head {i}: '{tokens[query]}' (position {query}) attends most to "
              f"'{tokens[top]}' (position {top}), weight {row[top]:.2f}")
    """),
    code("""
    import time

    t0 = time.perf_counter()  # timed for the comparison in section 3
    fig = head_grid_figure(weights, tokens, title=f"Random MHA on the demo sentence: h = {h}, N = {N}, "
                           f"query '{tokens[query]}' outlined", query=query)
    static_png = figure_bytes(fig, "png")
    full_figure_seconds = time.perf_counter() - t0
    display(Image(static_png))
    """),
    md(r"""
    ## 2 · The causal mask: exactly 0 above the diagonal, for every head and batch item

    In a decoder, token $i$ may only read tokens $j \le i$. One $(N, N)$ mask is broadcast over the
    heads and over a batch of $B$ sentences.
    """),
    code("""
    from mha_core.teaching.demo import PASSAGE

    second = list(PASSAGE[N : 2 * N])  # the next N tokens of the passage, as a second sentence
    X_batch = np.stack([X, embed_tokens(second, cfg.d_model, seed=0)])  # (B, N, d_model)
    B = X_batch.shape[0]
    _, w_causal = multi_head_attention(X_batch, params, h, causal=True, return_weights=True)
    assert w_causal.shape == (B, h, N, N)

    future = ~causal_mask(N)  # (N, N): True above the diagonal
    for b in range(B):
        for i in range(h):
            assert np.all(w_causal[b, i][future] == 0.0)
    assert np.allclose(w_causal.sum(axis=-1), 1.0, atol=1e-5)
    assert np.all(w_causal[..., 0, 0] == 1.0)  # the first token can only read itself
    print(f"weights {w_causal.shape}: the {int(future.sum())} future entries of each of the "
          f"{B * h} maps are exactly 0; rows still sum to 1; token 0 puts weight 1 on itself")
    """),
    md(r"""
    The causal grid, drawn this time by `viz.HeadGrid`, the fast renderer behind the sliders below:
    """),
    code("""
    from mha_core.ui.viz import HeadGrid

    grid = HeadGrid()
    png = grid.render(w_causal[0], tokens, title=f"Causal MHA, sentence 1 of {B}: h = {h}, N = {N} "
                      f"(random weights)", query=query)
    display(Image(png))
    """),
    md(r"""
    ## 3 · Explore: $h$, $N$, the causal mask and the query token

    This is the dashboard's own panel (`mha_core.ui.widgets.head_explorer`). Moving a control
    recomputes the weights and redraws the grid; pick a query token to outline its row in every
    head. The weights are random unless trained ones are installed and selected.
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    from mha_core.ui.widgets import head_explorer

    head_explorer(h=h, N=N)
    """),
    md(r"""
    The same panel driven from code, to check what it promises: the query choices follow $N$, the
    causal toggle gives exactly-zero future weights for every head, and an impossible query (as a
    forged browser message could send) gets a readable message instead of a traceback.
    """),
    code("""
    import html
    import re

    from mha_core.ui.widgets import head_weights

    probe = head_explorer(h=h, N=N)
    probe.N.value = 30
    assert len(probe.query.options) == 1 + 30  # "none" + one entry per token
    probe.causal.value = True
    labels_30, w_30, panel_title = head_weights(probe.h.value, 30, causal=True)
    assert w_30.shape == (h, 30, 30) and np.all(w_30[:, ~causal_mask(30)] == 0.0)
    print(f"N = 30: {len(probe.query.options) - 1} query choices; {panel_title}")

    assert probe.refresh(query=99) is False  # refused; the last figure stays
    message = html.unescape(re.sub(r"<[^>]+>", "", probe.status.value))  # the status line as text
    assert "query must be" in message
    print(f"query = 99 -> {message}")
    """),
    md(r"""
    **Why the sliders feel instant.** `HeadGrid` draws the frame (titles, colorbar) with matplotlib
    once per $h$ and afterwards only paints the $h$ maps into a copy of it and encodes a PNG. Below,
    the grid of section 1 drawn as a full matplotlib figure (timed when it was drawn) and
    through `HeadGrid`, in the same run (times vary with the machine, so this cell's output is not checked).
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    full = full_figure_seconds  # the matplotlib figure of section 1
    frames_before = grid.frames_built
    t0 = time.perf_counter()
    for q in range(10):  # ten moves of the query selector
        grid.render(weights, tokens, title="random weights", query=q)
    fast = (time.perf_counter() - t0) / 10
    assert grid.frames_built == frames_before  # same h: the frame was reused by every update
    print(f"full matplotlib figure: {full * 1e3:,.0f} ms; HeadGrid update: {fast * 1e3:,.1f} ms "
          f"({full / fast:,.0f}x faster)")
    """),
    md(r"""
    ## 4 · Exercise: write the causal mask

    Write `causal_mask(n)` returning a bool $(N, N)$ array with True where query $i$ may attend
    key $j$. `check_causal_mask` names the usual mistakes. A first attempt keeps the wrong triangle:
    """),
    code("""
    from mha_core.teaching.exercises import check_causal_mask

    attempt = check_causal_mask(lambda n: np.triu(np.ones((n, n), dtype=bool)))  # (N, N)
    assert not attempt.ok and attempt.pitfall == "causal_mask_upper"
    attempt
    """),
    md("A second attempt takes the lower triangle but starts one below the diagonal:"),
    code("""
    attempt = check_causal_mask(lambda n: np.tri(n, n, k=-1, dtype=bool))  # (N, N)
    assert not attempt.ok and attempt.pitfall == "causal_mask_without_diagonal"
    attempt
    """),
    md("Query $i$ reads keys $j \\le i$: the lower triangle, diagonal included."),
    code("""
    attempt = check_causal_mask(lambda n: np.tril(np.ones((n, n), dtype=bool)))  # (N, N)
    assert attempt.ok
    attempt
    """),
    md(r"""
    ## Recap

    - The layer's attention weights have shape $(h, N, N)$ ($(B, h, N, N)$ with a batch): one map
      per head, rows = queries, columns = keys.
    - Every row sums to 1.
    - One $(N, N)$ causal mask broadcasts over $B$ and $h$; every weight above the diagonal is
      exactly 0, and the first token attends only to itself.
    - The explorer above is the dashboard's own panel: change $h$, $N$, the mask and the query;
      it reuses its frame, so an update costs milliseconds rather than a full redraw.

    Next: `05_cost` measures what these maps cost as $h$ and $N$ grow.
    """),
]

if __name__ == "__main__":
    write("04_head_heatmaps.ipynb", [c for c in cells if not isinstance(c, str)])
