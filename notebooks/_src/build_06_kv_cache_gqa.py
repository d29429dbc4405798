"""Generate notebooks/06_kv_cache_gqa.ipynb (then execute it; see nbgen.py)."""

from nbgen import code, md, write

cells = [
    md(r"""
    # 06 · The KV cache, and sharing key/value heads (MQA, GQA)

    **You will learn**
    - why generating text one token at a time keeps every past token's keys and values in memory,
      and how big that cache is: $2 \cdot N \cdot d_{model} \cdot \text{layers}$ numbers;
    - how multi-query (MQA) and grouped-query attention (GQA) shrink it: keep $h$ query heads
      but only $n_{kv}$ key/value heads, so the cache shrinks by $h / n_{kv}$;
    - that GQA with $n_{kv} = h$ is exactly ordinary multi-head attention;
    - what the cache weighs for a realistic model (32 layers, $d_{model}=4096$, 32k tokens, fp16).

    **Assumed:** notebooks 01 to 03 (heads, shapes and counts). Symbols: $N$ tokens, $d_{model}$
    width, $h$ query heads, $n_{kv}$ key/value heads, $d_k = d_{model}/h$.
    """),
    code("""
    import ipywidgets as widgets
    import numpy as np
    from IPython.display import display

    from mha_core import (
        MHAConfig,
        count_params,
        init_params,
        kv_cache_bytes,
        multi_head_attention,
    )
    """),
    md(r"""
    ## 1 · What the cache holds, built for real

    When a model generates token $N+1$, its new query must attend to the keys and values of all $N$
    earlier tokens in every layer. Those do not change, so they are computed once and kept: per layer,
    $K$ and $V$ of shape $(N, n_{kv} d_k)$, which is $(N, d_{model})$ for plain multi-head attention.

    Below, a small 4-layer stack runs on 100 tokens. We keep each layer's $K = X W_K$ and $V = X W_V$
    in fp16, exactly what a decoder would cache, and compare the bytes with `kv_cache_bytes`.
    """),
    code("""
    cfg = MHAConfig(d_model=256, n_heads=8)
    LAYERS, N = 4, 100
    rng = np.random.default_rng(0)
    layer_params = [init_params(cfg, rng) for _ in range(LAYERS)]
    x = rng.standard_normal((N, cfg.d_model)).astype(np.float32)  # (N, d_model)

    cache = []
    for p in layer_params:
        K = (x @ p["W_K"]).astype(np.float16)  # (N, n_kv*d_k) = (N, d_model) here
        V = (x @ p["W_V"]).astype(np.float16)  # (N, n_kv*d_k)
        cache.append((K, V))
        x = x + multi_head_attention(x, p, cfg.h, causal=True)  # (N, d_model), residual stream

    built = sum(K.nbytes + V.nbytes for K, V in cache)
    elements = sum(K.size + V.size for K, V in cache)
    assert elements == 2 * N * cfg.d_model * LAYERS
    assert built == kv_cache_bytes(cfg, N, n_layers=LAYERS, dtype=np.float16)
    print(f"{LAYERS} layers x (K, V) of shape {cache[0][0].shape}: {elements:,} numbers = {built:,} bytes in fp16")
    print(f"2 · N · d_model · layers = 2 · {N} · {cfg.d_model} · {LAYERS} = {2 * N * cfg.d_model * LAYERS:,}")
    """),
    md(r"""
    The cache is proportional to $h \cdot d_k = d_{model}$: it is the keys and values of every head.
    That is the handle MQA and GQA pull on.

    ## 2 · Fewer key/value heads

    With $n_{kv}$ key/value heads, query head $i$ reads key/value head $\lfloor i / (h/n_{kv}) \rfloor$.
    $W_K$ and $W_V$ shrink to $(d_{model}, n_{kv} d_k)$, and so does the cache. $W_Q$ and $W_O$ keep
    their size.

    - $n_{kv} = h$ is ordinary multi-head attention (MHA).
    - $n_{kv} = 1$ is multi-query attention (MQA).
    - Anything in between is grouped-query attention (GQA).
    """),
    code("""
    divisors = [n for n in range(cfg.h, 0, -1) if cfg.h % n == 0]
    mha_cache = kv_cache_bytes(cfg, N, n_layers=LAYERS)
    print(f"h={cfg.h}, d_model={cfg.d_model}, N={N}, {LAYERS} layers, fp16")
    for n_kv in divisors:
        c = MHAConfig(cfg.d_model, cfg.h, n_kv_heads=n_kv)
        bytes_ = kv_cache_bytes(c, N, n_layers=LAYERS)
        counts = count_params(c)
        assert bytes_ * (cfg.h // n_kv) == mha_cache  # the cache shrinks by h / n_kv
        assert counts["W_K"] == counts["W_V"] == cfg.d_model * n_kv * cfg.d_k
        assert counts["W_Q"] == counts["W_O"] == cfg.d_model**2  # untouched
        kind = "MHA" if n_kv == cfg.h else "MQA" if n_kv == 1 else "GQA"
        print(f"n_kv={n_kv} ({kind}): cache {bytes_:>9,} B ({bytes_ / mha_cache:6.1%}), "
              f"params {counts['total']:,}")
    """),
    md(r"""
    ## 3 · GQA with $n_{kv} = h$ is MHA, exactly

    With one key/value head per query head there is nothing to share, and the same weights give the
    same output, bit for bit.
    """),
    code("""
    x0 = np.random.default_rng(1).standard_normal((N, cfg.d_model)).astype(np.float32)  # (N, d_model)
    p = layer_params[0]
    mha_out = multi_head_attention(x0, p, cfg.h, causal=True)  # (N, d_model)
    gqa_out = multi_head_attention(x0, p, cfg.h, n_kv_heads=cfg.h, causal=True)  # (N, d_model)
    assert np.array_equal(mha_out, gqa_out)
    print(f"n_kv_heads={cfg.h}: identical to MHA, max difference {np.abs(mha_out - gqa_out).max():.1f}")
    """),
    md(r"""
    The other direction says what sharing means. A GQA layer with $n_{kv}=2$ is an MHA layer whose
    $h$ key heads come in groups of $h/n_{kv}=4$ identical copies (and the same for values). Copy
    each key/value column block into its group and plain MHA gives the GQA output: sharing changes
    what is stored, not what the heads compute.
    """),
    code("""
    n_kv = 2
    group = cfg.h // n_kv
    gqa_params = init_params(MHAConfig(cfg.d_model, cfg.h, n_kv_heads=n_kv), rng=2)
    W_K = gqa_params["W_K"].reshape(cfg.d_model, n_kv, cfg.d_k)  # (d_model, n_kv, d_k)
    W_V = gqa_params["W_V"].reshape(cfg.d_model, n_kv, cfg.d_k)  # (d_model, n_kv, d_k)
    expanded = dict(
        gqa_params,
        W_K=np.repeat(W_K, group, axis=1).reshape(cfg.d_model, cfg.d_model),  # (d_model, h*d_k)
        W_V=np.repeat(W_V, group, axis=1).reshape(cfg.d_model, cfg.d_model),  # (d_model, h*d_k)
    )
    shared = multi_head_attention(x0, gqa_params, cfg.h, n_kv_heads=n_kv, causal=True)  # (N, d_model)
    copied = multi_head_attention(x0, expanded, cfg.h, causal=True)  # (N, d_model)
    assert np.allclose(shared, copied, atol=1e-5)
    saved = expanded["W_K"].size - gqa_params["W_K"].size
    print(f"GQA (n_kv={n_kv}) = MHA with each K/V head copied {group}x; the copies would cost "
          f"{saved:,} extra weights in W_K alone")
    """),
    md(r"""
    ## 4 · Slide from MHA to MQA

    A realistic model this time: 32 layers, $d_{model}=4096$, $h=32$ ($d_k=128$), fp16, batch 1.
    The slider offers only divisors of $h$; the readout is computed with `kv_cache_bytes` and
    `count_params`. The context length can be changed too.
    """),
    code('''
    BIG = dict(d_model=4096, n_heads=32, layers=32)
    GIB = 2**30


    def kv_summary(n_kv, n_tokens: int = 32_768) -> str:
        """HTML readout for n_kv key/value heads; a readable message for a bad value."""
        h = BIG["n_heads"]
        if isinstance(n_kv, bool) or not isinstance(n_kv, (int, np.integer)) or not 1 <= n_kv <= h:
            return f"<b>n_kv must be an integer from 1 to h={h}</b>, got {n_kv!r}"
        if h % n_kv:
            return f"<b>n_kv={n_kv} does not divide h={h}</b>: choose one of {[d for d in range(1, h + 1) if h % d == 0]}"
        if isinstance(n_tokens, bool) or not isinstance(n_tokens, (int, np.integer)) or n_tokens < 1:
            return f"<b>the context length must be a positive integer</b>, got {n_tokens!r}"
        c = MHAConfig(BIG["d_model"], h, n_kv_heads=int(n_kv))
        cache = kv_cache_bytes(c, int(n_tokens), n_layers=BIG["layers"])
        full = kv_cache_bytes(MHAConfig(BIG["d_model"], h), int(n_tokens), n_layers=BIG["layers"])
        layer = count_params(c)["total"]
        kind = "MHA" if n_kv == h else "MQA" if n_kv == 1 else "GQA"
        return (f"<b>{kind}</b>, n_kv={n_kv}: {h // n_kv} query heads per K/V head<br>"
                f"KV cache at N={n_tokens:,}: <b>{cache / GIB:,.2f} GiB</b> ({cache:,} bytes, "
                f"{cache / full:.1%} of MHA)<br>"
                f"attention weights per layer: {layer:,} ({layer * BIG['layers']:,} for {BIG['layers']} layers)")
    '''),
    code("""
    assert "does not divide" in kv_summary(3) and "from 1 to" in kv_summary(0)
    assert "from 1 to" in kv_summary("8") and "positive integer" in kv_summary(8, n_tokens=0)
    print(kv_summary(3).replace("<b>", "").replace("</b>", ""))
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    h_big = BIG["n_heads"]
    n_kv_slider = widgets.SelectionSlider(
        options=[d for d in range(h_big, 0, -1) if h_big % d == 0], value=h_big,
        description="n_kv", continuous_update=True,
    )
    n_slider = widgets.SelectionSlider(
        options=[2**k for k in range(10, 18)], value=32_768, description="N", continuous_update=True,
    )
    readout = widgets.HTML(kv_summary(n_kv_slider.value, n_slider.value))


    def update(_change) -> None:
        readout.value = kv_summary(n_kv_slider.value, n_slider.value)


    n_kv_slider.observe(update, names="value")
    n_slider.observe(update, names="value")
    display(widgets.VBox([n_kv_slider, n_slider, readout]))
    """),
    code("""
    n_kv_slider.value = 8  # what moving the slider does
    assert "GQA" in readout.value and "25.0% of MHA" in readout.value
    n_kv_slider.value = h_big
    print("slider callback checked: n_kv=8 -> 25.0% of the MHA cache")
    """),
    md(r"""
    ## 5 · The realistic table

    Same model, 32k context ($N = 32{,}768$), fp16, batch 1. The per-token figure is what every new
    token adds.
    """),
    code("""
    N_CTX = 32_768
    rows = [("MHA", 32), ("GQA", 8), ("MQA", 1)]
    table = {}
    print(f"{'':4} {'n_kv':>4} {'per token':>10} {'cache at 32k':>13}")
    for name, n_kv in rows:
        c = MHAConfig(BIG["d_model"], BIG["n_heads"], n_kv_heads=n_kv)
        total = kv_cache_bytes(c, N_CTX, n_layers=BIG["layers"])
        per_token = kv_cache_bytes(c, 1, n_layers=BIG["layers"])
        assert total == N_CTX * per_token
        table[name] = total
        print(f"{name:4} {n_kv:>4} {per_token / 2**10:>7,.0f} KiB {total / GIB:>9,.2f} GiB")

    fp16 = np.dtype(np.float16).itemsize
    assert table["MHA"] == 2 * N_CTX * BIG["d_model"] * BIG["layers"] * fp16 == 16 * GIB
    assert table["GQA"] * 4 == table["MHA"] and table["MQA"] * 32 == table["MHA"]
    """),
    md(r"""
    Sixteen GiB of cache for a single 32k-token sequence is more than the fp16 weights of such a
    model's attention layers ($32 \times 4 \times 4096^2 \times 2$ bytes = 4 GiB). GQA with 8
    key/value heads cuts it to 4 GiB, MQA to 0.5 GiB. On a CPU, decoding reads the whole cache for
    every new token, so a smaller cache is also faster decoding.
    """),
    code("""
    attn_weight_bytes = BIG["layers"] * count_params(MHAConfig(BIG["d_model"], BIG["n_heads"]))["total"] * fp16
    assert attn_weight_bytes == 4 * GIB and table["MHA"] == 4 * attn_weight_bytes
    assert table["GQA"] == 4 * GIB and table["MQA"] == GIB // 2
    print(f"attention weights: {attn_weight_bytes / GIB:.0f} GiB; MHA cache at 32k: {table['MHA'] / GIB:.0f} GiB")
    """),
    md(r"""
    ## Recap

    - The KV cache holds $K$ and $V$ for every past token in every layer:
      $2 \cdot N \cdot n_{kv} d_k \cdot \text{layers}$ numbers, that is $2 \cdot N \cdot d_{model}
      \cdot \text{layers}$ for MHA. A cache built from real projections matches `kv_cache_bytes`.
    - GQA and MQA keep $h$ query heads and share $n_{kv}$ key/value heads: the cache and
      $W_K, W_V$ shrink by $h / n_{kv}$, while $W_Q$ and $W_O$ do not change.
    - $n_{kv} = h$ reproduces MHA exactly; $n_{kv} < h$ equals MHA with copied key/value heads.
    - At 32 layers, $d_{model} = 4096$, 32k tokens in fp16: 16 GiB (MHA), 4 GiB (GQA, 8 K/V
      heads), 0.5 GiB (MQA).

    Next: notebook 07 runs the classic mistakes and measures what each one breaks.
    """),
]

if __name__ == "__main__":
    print(write("06_kv_cache_gqa.ipynb", cells))
