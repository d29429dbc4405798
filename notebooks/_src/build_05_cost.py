"""Generate notebooks/05_cost.ipynb (then execute it; see nbgen.py)."""

from nbgen import code, md, write

cells = [
    md(r"""
    # 05 · What multi-head attention costs

    **You will learn**
    - that the parameter count, $4\,d_{model}^2$, does not depend on the number of heads $h$;
    - that the multiply-accumulates (MACs) do not depend on $h$ either, and split into a projection
      term that grows like $N$ and an attention term that grows like $N^2$;
    - that the softmax is the one piece of work that does grow with $h$: $h \cdot N^2$ exponentials;
    - what "multi-head is nearly free" looks like on a real CPU clock, including where it stops being true;
    - how the attention sublayer compares with the feed-forward network next to it.

    **Assumed:** notebook 03 (the worked example's counts). Symbols: $N$ tokens, $d_{model}$ width,
    $h$ heads, $d_k = d_{model}/h$. One MAC is one multiply plus one add, about 2 FLOPs.
    """),
    code("""
    import timeit
    from functools import partial

    import matplotlib.pyplot as plt
    import numpy as np

    from mha_core import (
        MHAConfig,
        count_macs,
        count_params,
        init_params,
        multi_head_attention,
        multi_head_attention_per_head,
        softmax,
        trace_config,
    )

    D_MODEL = 512  # the texts' worked example
    HEADS = [h for h in (1, 2, 4, 8, 16, 32, 64, 128) if D_MODEL % h == 0]  # d_k from 512 down to 4
    """),
    md(r"""
    ## 1 · Parameters and MACs against $h$: flat

    $W_Q, W_K, W_V$ are $(d_{model}, h\,d_k)$ and $W_O$ is $(h\,d_k, d_{model})$. Because
    $h\,d_k = d_{model}$ whatever $h$ is, the head count only decides how the same matrices are cut
    into column blocks. The counters and the real arrays agree.
    """),
    code("""
    N = 100
    params_by_h = {h: count_params(MHAConfig(D_MODEL, h))["total"] for h in HEADS}
    macs_by_h = {h: count_macs(MHAConfig(D_MODEL, h), N) for h in HEADS}

    for h in HEADS:
        arrays = init_params(MHAConfig(D_MODEL, h), rng=0)
        assert sum(a.size for a in arrays.values()) == params_by_h[h] == 4 * D_MODEL**2
        assert macs_by_h[h]["total"] == macs_by_h[1]["total"]
        assert macs_by_h[h]["softmax_exps"] == h * N**2
        d_k = D_MODEL // h
        print(f"h={h:>3}  d_k={d_k:>3}  params={params_by_h[h]:,}  MACs={macs_by_h[h]['total']:,}  "
              f"softmax exps={macs_by_h[h]['softmax_exps']:,}")
    """),
    code("""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.plot(HEADS, [params_by_h[h] for h in HEADS], "o-", label="parameters")
    ax1.plot(HEADS, [macs_by_h[h]["total"] for h in HEADS], "s-", label=f"MACs at N={N}")
    ax1.set(xscale="log", yscale="log", xlabel="h (heads), d_model fixed at 512", ylabel="count",
            title="Parameters and MACs do not depend on h")
    ax1.set_xticks(HEADS, [str(h) for h in HEADS])
    ax1.legend()
    ax2.plot(HEADS, [macs_by_h[h]["softmax_exps"] for h in HEADS], "o-", color="tab:orange")
    ax2.set(xscale="log", yscale="log", xlabel="h (heads)", ylabel="exponentials",
            title=f"Softmax work = h·N² (N={N})")
    ax2.set_xticks(HEADS, [str(h) for h in HEADS])
    fig.tight_layout()
    plt.show()
    """),
    md(r"""
    ## 2 · MACs against $N$: a linear term and a quadratic term

    `count_macs` splits the work in two.

    - The four projections cost $4 N d_{model}^2$, linear in $N$.
    - The attention core ($Q K^\top$, then weights times $V$) costs $2 N^2 d_{model}$, quadratic in $N$.

    The two are equal when $4 N d_{model}^2 = 2 N^2 d_{model}$, that is at $N = 2\,d_{model}$.
    """),
    code("""
    cfg = MHAConfig(D_MODEL, 8)
    Ns = np.unique(np.geomspace(16, 8 * D_MODEL, 25).astype(int))
    proj = np.array([count_macs(cfg, int(n))["projections"] for n in Ns])
    attn = np.array([count_macs(cfg, int(n))["attention"] for n in Ns])
    assert (proj == 4 * Ns * D_MODEL**2).all() and (attn == 2 * Ns**2 * D_MODEL).all()

    crossover = 2 * D_MODEL
    at_cross = count_macs(cfg, crossover)
    assert at_cross["projections"] == at_cross["attention"]
    doubled = count_macs(cfg, 2 * crossover)
    assert doubled["projections"] == 2 * at_cross["projections"]  # linear
    assert doubled["attention"] == 4 * at_cross["attention"]  # quadratic
    print(f"crossover at N = 2·d_model = {crossover:,}: both terms are {at_cross['attention']:,} MACs")
    print(f"at N = {2 * crossover:,}: projections x2, attention x4")
    """),
    code("""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.loglog(Ns, proj, label="projections: 4·N·d_model²")
    ax.loglog(Ns, attn, label="attention core: 2·N²·d_model")
    ax.loglog(Ns, proj + attn, "k--", lw=1, label="total")
    ax.axvline(crossover, color="grey", ls=":")
    ax.annotate("N = 2·d_model", (crossover, proj.min()), rotation=90, ha="right", va="bottom")
    ax.set(xlabel="N (tokens)", ylabel="MACs per layer",
           title=f"MACs against N (d_model={D_MODEL}, any h)")
    ax.legend()
    plt.show()
    """),
    md(r"""
    The closed forms are not taken on trust: `trace_config` runs the layer and counts every matmul
    it actually performs.
    """),
    code("""
    for h in (1, 4, 16):
        small = MHAConfig(64, h)
        traced = trace_config(small, 48).total_macs()
        assert traced == count_macs(small, 48)["total"]
        print(f"d_model=64, h={h:>2}, N=48: traced {traced:,} MACs = count_macs")
    """),
    md(r"""
    ## 3 · The softmax is the part that grows with $h$

    Each head normalises its own $N \times N$ map, so there are $h N^2$ exponentials instead of $N^2$.
    The score matmul does $d_k$ MACs per score, the softmax one exponential per score: it has no
    factor of $d_k$, so next to the MACs it is a small term until $d_k$ itself gets small.
    """),
    code("""
    for h in (1, 8, 64):
        m = count_macs(MHAConfig(D_MODEL, h), N)
        assert m["scores"] == m["softmax_exps"] * (D_MODEL // h)  # d_k MACs per exponential
        share = m["softmax_exps"] / m["total"]
        print(f"h={h:>2} (d_k={D_MODEL // h:>3}): {m['softmax_exps']:>9,} exps = {share:.3%} of the MACs")
    """),
    md(r"""
    ## 4 · "Multi-head is nearly free", on the clock

    The counts say the work is the same for every $h$. The clock also measures how well the CPU runs
    that work. With $d_{model}=512$ fixed, we time three things for each $h$:

    - the whole fused forward (`multi_head_attention`);
    - the two attention matmuls alone, $Q K^\top$ and weights times $V$, on $h$ heads of width $d_k$
      (the same $2 N^2 d_{model}$ MACs for every $h$);
    - the softmax alone on the $(h, N, N)$ scores ($h N^2$ exponentials).

    Each figure is the best of several interleaved repeats. Compare numbers within one run; yours
    will differ from the stored ones. On a machine busy with other work, a multi-threaded matmul can
    stall while it waits for a core, so a single value far off its neighbours is noise: re-run the
    cell.
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    N_TIME, REPEATS = 128, 10
    BUDGET_S = 2.0  # stop repeating after this many seconds (3 rounds at least): cheap even on a busy machine
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N_TIME, D_MODEL)).astype(np.float32)  # (N, d_model)


    def best_ms(runs: dict, repeats: int = REPEATS) -> dict:
        \"\"\"Best wall time (ms) of each ``fn()`` in ``runs``, interleaved so noise hits all alike.\"\"\"
        for fn in runs.values():
            fn()  # warm-up: first-call costs (allocation, BLAS threads) are not what we measure
        best = dict.fromkeys(runs, float("inf"))
        start = timeit.default_timer()
        for round_ in range(repeats):
            for key, fn in runs.items():
                best[key] = min(best[key], 1e3 * timeit.timeit(fn, number=1))
            if round_ >= 2 and timeit.default_timer() - start > BUDGET_S:
                break
        return best


    runs = {}
    for h in HEADS:
        p = init_params(MHAConfig(D_MODEL, h), rng=h)
        d_k = D_MODEL // h
        q, k_t, v = (rng.standard_normal(shape).astype(np.float32)
                     for shape in ((h, N_TIME, d_k), (h, d_k, N_TIME), (h, N_TIME, d_k)))
        weights = softmax(rng.standard_normal((h, N_TIME, N_TIME)).astype(np.float32))  # (h, N, N)
        runs[h, "forward"] = partial(multi_head_attention, x, p, h)
        runs[h, "QK^T"] = partial(np.matmul, q, k_t)  # (h, N, d_k) @ (h, d_k, N) -> (h, N, N)
        runs[h, "AV"] = partial(np.matmul, weights, v)  # (h, N, N) @ (h, N, d_k) -> (h, N, d_k)
        runs[h, "softmax"] = partial(softmax, weights)
    best = best_ms(runs)
    timing = {h: {"forward": best[h, "forward"], "matmuls": best[h, "QK^T"] + best[h, "AV"],
                  "softmax": best[h, "softmax"]} for h in HEADS}

    matmul_flops = 2 * count_macs(MHAConfig(D_MODEL, 1), N_TIME)["attention"]  # FLOPs, same for every h
    print(f"N={N_TIME}, d_model={D_MODEL}, float32, best of up to {REPEATS} interleaved runs")
    print("  h  d_k  forward ms  matmuls ms  matmul GFLOP/s  softmax ms")
    for h, t in timing.items():
        gflops = matmul_flops / (t["matmuls"] * 1e-3) / 1e9
        print(f"{h:>3} {D_MODEL // h:>4} {t['forward']:>11.2f} {t['matmuls']:>11.2f} {gflops:>15.1f} "
              f"{t['softmax']:>11.2f}")
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    assert set(timing) == set(HEADS) and all(v > 0 for t in timing.values() for v in t.values())
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, marker in (("forward", "o-"), ("matmuls", "s-"), ("softmax", "^-")):
        ax1.plot(HEADS, [timing[h][key] for h in HEADS], marker, label=key)
    ax1.set(xscale="log", yscale="log", xlabel="h (heads), d_model = 512", ylabel="wall time (ms)",
            title=f"Same MACs, different clock (N={N_TIME})")
    ax1.set_xticks(HEADS, [str(h) for h in HEADS])
    ax1.legend()
    d_ks = [D_MODEL // h for h in HEADS]
    ax2.plot(d_ks, [matmul_flops / (timing[h]["matmuls"] * 1e-3) / 1e9 for h in HEADS], "o-")
    ax2.set(xscale="log", xlabel="d_k = d_model / h", ylabel="GFLOP/s of QK^T and AV",
            title="Small d_k: same FLOPs, less speed")
    ax2.set_xticks(d_ks, [str(d) for d in d_ks])
    ax2.invert_xaxis()
    fig.tight_layout()
    plt.show()
    """),
    md(r"""
    The summary below is computed from the table above, not written in advance. What to look for:

    - **Moderate $h$ ($d_k$ of 64 or more).** If "nearly free" holds on this CPU, the forward pass
      stays near the $h=1$ time: the projections, identical for every $h$, are most of the work.
    - **Large $h$ (tiny $d_k$).** Each score costs $d_k$ MACs but is one number to write, so at
      $d_k = 4$ the matmuls move almost as many bytes as they do arithmetic, and their GFLOP/s
      tends to fall. The softmax, $h N^2$ exponentials with no $d_k$ factor, grows in step with $h$.

    The MAC count is the same for every $h$. Whether the clock agrees depends on $d_k$ and on the
    hardware, which is why it is measured here rather than assumed.
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    base = timing[1]["forward"]
    for h in HEADS:
        t = timing[h]
        print(f"h={h:>3} (d_k={D_MODEL // h:>3}): forward {t['forward'] / base:5.2f}x the h=1 time; "
              f"matmuls {t['matmuls'] / t['forward']:4.0%} and softmax {t['softmax'] / t['forward']:4.0%} of it")
    slowest = max(HEADS, key=lambda h: timing[h]["forward"])
    print(f"slowest forward in this run: h={slowest} (d_k={D_MODEL // slowest})")
    """),
    md(r"""
    ## 5 · One batched matmul against a loop over heads

    `multi_head_attention` does every head in one batched matmul; `multi_head_attention_per_head`
    loops over the heads in Python, as the equations are usually written. They compute the same thing
    (asserted first), and we time both in the same run. The ratio is what to read, not the
    milliseconds.
    """),
    code("""
    for h in (8, 64):
        p = init_params(MHAConfig(D_MODEL, h), rng=h)
        fused = multi_head_attention(x, p, h)
        looped = multi_head_attention_per_head(x, p, h)
        assert np.allclose(fused, looped, atol=1e-5)
    print("fused and per-head loop agree for h = 8 and h = 64")
    """),
    code("""
    # NBVAL_IGNORE_OUTPUT
    runs = {}
    for h in (8, 64):
        p = init_params(MHAConfig(D_MODEL, h), rng=h)
        runs[h, "fused"] = partial(multi_head_attention, x, p, h)
        runs[h, "loop"] = partial(multi_head_attention_per_head, x, p, h)
    best = best_ms(runs, repeats=7)
    for h in (8, 64):
        fused, loop = best[h, "fused"], best[h, "loop"]
        print(f"h={h:>2}: fused {fused:6.2f} ms, loop {loop:6.2f} ms, loop/fused = {loop / fused:.2f}")
    """),
    md(r"""
    ## 6 · Next to the feed-forward network

    A transformer block has a feed-forward network (FFN) beside the attention sublayer: two matrices,
    $d_{model} \times 4 d_{model}$ and $4 d_{model} \times d_{model}$ for the usual 4x expansion.
    That is $8\,d_{model}^2$ weights, twice the attention sublayer's $4\,d_{model}^2$. Per token the
    FFN also does $8\,d_{model}^2$ MACs against the projections' $4\,d_{model}^2$. The attention
    core's $2 N^2 d_{model}$ only catches up with the FFN's $8 N d_{model}^2$ at $N = 4\,d_{model}$.
    """),
    code("""
    EXPANSION = 4  # the usual FFN hidden width, 4 x d_model
    attn_params = count_params(MHAConfig(D_MODEL, 8))["total"]
    ffn_params = D_MODEL * (EXPANSION * D_MODEL) + (EXPANSION * D_MODEL) * D_MODEL  # two matrices, no biases
    assert attn_params == 4 * D_MODEL**2 and ffn_params == 8 * D_MODEL**2 == 2 * attn_params
    share = attn_params / (attn_params + ffn_params)
    print(f"d_model={D_MODEL}: attention {attn_params:,} params, FFN {ffn_params:,} params")
    print(f"attention is {share:.1%} of the block's weights")

    ffn_macs_per_token = ffn_params  # each weight is used once per token
    m = count_macs(MHAConfig(D_MODEL, 8), N)
    assert m["projections"] // N == 4 * D_MODEL**2 and ffn_macs_per_token == 2 * (m["projections"] // N)
    print(f"per token: FFN {ffn_macs_per_token:,} MACs, attention projections {m['projections'] // N:,}")

    n_equal = 4 * D_MODEL  # 2·N²·d_model = 8·d_model²·N  <=>  N = 4·d_model
    assert count_macs(MHAConfig(D_MODEL, 8), n_equal)["attention"] == n_equal * ffn_macs_per_token
    print(f"the attention core's N² term matches the FFN's MACs at N = 4·d_model = {n_equal:,}")
    """),
    md(r"""
    ## Recap

    - Parameters are $4\,d_{model}^2$ and MACs $4 N d_{model}^2 + 2 N^2 d_{model}$ for every $h$;
      the head count only re-cuts the same matrices.
    - The projection term is linear in $N$, the attention term quadratic; they cross at $N = 2\,d_{model}$.
    - The softmax does $h N^2$ exponentials: the one count that grows with $h$, with no $d_k$ factor.
    - On the clock, "nearly free" is a statement about moderate $h$. With very small $d_k$ the
      attention matmuls run at a fraction of the CPU's speed and the $h N^2$ softmax shows. Measure
      on your own hardware.
    - One batched matmul replaces the loop over heads with the same result.
    - The FFN's $8\,d_{model}^2$ weights are twice the attention sublayer's.

    Next: notebook 06 looks at the memory that does depend on the heads, the KV cache.
    """),
]

if __name__ == "__main__":
    print(write("05_cost.ipynb", cells))
