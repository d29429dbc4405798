"""Generate notebooks/03_worked_example.ipynb (then execute it; see nbgen.py)."""

from nbgen import code, md, write

cells = [
    md(r"""
    # 03 · A worked example: $d_{model}=512$, $h=8$, $N=100$

    **You will learn**
    - the exact parameter count of one multi-head attention layer, $4\,d_{model}^2$;
    - its compute in multiply-accumulates (MACs): $4 N d_{model}^2$ for the four projections plus
      $2 N^2 d_{model}$ for the attention core, and FLOPs $\approx 2 \times$ MACs;
    - why short sequences are projection-bound and long ones attention-bound, and that the two
      terms cross at exactly $N = 2\,d_{model}$;
    - that these closed-form counts match what an instrumented run actually multiplies.

    **Assumed:** notebook 01 (what one head computes). Symbols: $N$ tokens, $d_{model}$ width,
    $h$ heads, $d_k = d_{model}/h$. One MAC is one multiply plus one add.
    """),
    code("""
    import matplotlib.pyplot as plt
    import numpy as np

    from mha_core import MHAConfig, count_macs, count_params, init_params, trace_config

    cfg = MHAConfig(d_model=512, n_heads=8)
    d_model, h, d_k = cfg.d_model, cfg.h, cfg.d_k
    N = 100
    assert d_k == 64
    print(f"d_model = {d_model}, h = {h}, d_k = d_model / h = {d_k}, N = {N}")
    """),
    md(r"""
    ## 1 · The shapes, recorded from a real run

    `trace_config` runs the layer once on random input and records every step's shape, so the ledger
    below is what the code did, not a table typed by hand.
    """),
    code("""
    trace_100 = trace_config(cfg, N, seed=0)
    for step, shape in trace_100.steps:
        print(f"{step:<28} {shape}")

    shapes = dict(trace_100.steps)
    assert shapes["Q heads: transpose"] == (h, N, d_k)
    assert shapes["scores = Q K^T / sqrt(d_k)"] == (h, N, N)
    assert shapes["out = concat @ W_O"] == shapes["X"] == (N, d_model)
    """),
    md(r"""
    ## 2 · Parameters: $4\,d_{model}^2$, whatever $h$ is
    """),
    code("""
    params = count_params(cfg)
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        assert params[name] == d_model * d_model == 262_144
        print(f"{name}: {d_model} x {d_model} = {params[name]:,}")
    assert params["total"] == 4 * d_model**2 == 1_048_576
    print(f"total: {params['total']:,} weights (about {params['total'] / 1e6:.2f} M)")

    # the counter agrees with the arrays a real layer allocates, and h does not enter
    arrays = init_params(cfg, rng=0)
    assert sum(w.size for w in arrays.values()) == params["total"]
    assert all(count_params(MHAConfig(d_model, hh))["total"] == params["total"] for hh in (1, 2, 4, 16))
    """),
    md(r"""
    ## 3 · Compute at $N=100$
    """),
    code("""
    macs_100 = count_macs(cfg, N)
    proj, attn = macs_100["projections"], macs_100["attention"]
    assert proj == 4 * N * d_model**2 == 104_857_600
    assert attn == 2 * N**2 * d_model == 10_240_000
    total = macs_100["total"]
    flops = 2 * total
    assert total == proj + attn == 115_097_600
    assert round(flops / 1e6, -1) == 230  # "about 230 M FLOPs"

    ratio_100 = proj / attn
    assert round(ratio_100) == 10
    print(f"projections 4·N·d_model² = {proj:,} MACs")
    print(f"attention   2·N²·d_model = {attn:,} MACs")
    print(f"total {total:,} MACs ≈ {flops:,} FLOPs (about {flops / 1e6:.0f} M)")
    print(f"projections / attention = {ratio_100:.2f}: at N = {N} the layer is projection-bound")
    """),
    md(r"""
    ## 4 · The same counts from an instrumented run

    The tracer notes the MACs of every matrix product as it happens (one per output element per
    summed index). Grouping them by step gives the two terms again.
    """),
    code("""
    def traced_terms(tracer) -> tuple[int, int]:
        \"\"\"(projection MACs, attention-core MACs) that a traced run actually performed.\"\"\"
        proj = sum(tracer.total_macs(p) for p in ("Q = ", "K = ", "V = ", "out = "))
        attn = tracer.total_macs("scores") + tracer.total_macs("head outputs")
        return proj, attn


    for step, m in trace_100.macs:
        print(f"{step:<28} {m:>13,} MACs")
    assert traced_terms(trace_100) == (proj, attn)
    assert trace_100.total_macs() == total
    print(f"traced total {trace_100.total_macs():,} == count_macs total {total:,}")
    """),
    md(r"""
    ## 5 · At $N=2000$ it reverses

    The projections grow like $N$, the attention core like $N^2$. The weights stay the same
    1,048,576.
    """),
    code("""
    N_long = 2000
    macs_long = count_macs(cfg, N_long)
    proj_long, attn_long = macs_long["projections"], macs_long["attention"]
    assert (proj_long, attn_long) == (4 * N_long * d_model**2, 2 * N_long**2 * d_model)
    assert round(proj_long / 1e9, 1) == 2.1 and round(attn_long / 1e9, 1) == 4.1
    assert attn_long > proj_long

    trace_long = trace_config(cfg, N_long, seed=0)  # one real run at N = 2000 (about a second)
    assert traced_terms(trace_long) == (proj_long, attn_long)
    print(f"N = {N_long:,}: projections {proj_long:,} (≈{proj_long / 1e9:.1f} B) MACs, "
          f"attention {attn_long:,} (≈{attn_long / 1e9:.1f} B) MACs; traced run agrees")
    print(f"attention / projections = {attn_long / proj_long:.2f}: now attention-bound")
    """),
    md(r"""
    ## 6 · Where the two terms cross

    Scan $N$ and find the first length at which the attention core costs at least as much as the
    projections. Algebra says $4 N d_{model}^2 = 2 N^2 d_{model}$ at $N = 2\,d_{model}$; the scan
    finds it for several widths, and the two terms are exactly equal there.
    """),
    code("""
    def crossover(config: MHAConfig, n_max: int) -> int:
        \"\"\"Smallest N <= n_max whose attention-core MACs reach the projection MACs.\"\"\"
        for n in range(1, n_max + 1):
            m = count_macs(config, n)
            if m["attention"] >= m["projections"]:
                return n
        raise ValueError(f"no crossover up to n_max={n_max}")


    for width in (256, 512, 1024):
        n_star = crossover(MHAConfig(width, 8), n_max=4 * width)
        m = count_macs(MHAConfig(width, 8), n_star)
        assert n_star == 2 * width and m["attention"] == m["projections"]
        print(f"d_model = {width:>5,}: crossover at N = {n_star:,} = 2·d_model, "
              f"both terms {m['projections']:,} MACs")

    N_star = 2 * d_model
    """),
    code("""
    Ns = np.unique(np.geomspace(10, 8 * d_model, 200).astype(int))
    terms = [count_macs(cfg, int(n)) for n in Ns]
    proj_curve = np.array([t["projections"] for t in terms])
    attn_curve = np.array([t["attention"] for t in terms])
    colors = plt.cm.viridis([0.15, 0.7])

    fig, ax = plt.subplots(figsize=(7, 4.2), constrained_layout=True)
    ax.loglog(Ns, proj_curve, color=colors[0], lw=2, label="projections 4·N·d_model²  (∝ N)")
    ax.loglog(Ns, attn_curve, color=colors[1], lw=2, label="attention core 2·N²·d_model  (∝ N²)")
    at_star = count_macs(cfg, N_star)["projections"]
    ax.axvline(N_star, color="0.4", ls="--", lw=1)
    ax.plot([N_star], [at_star], "o", color="black")
    ax.annotate(f"crossover N = 2·d_model = {N_star:,}", (N_star, at_star),
                xytext=(-12, 10), textcoords="offset points", ha="right")
    for n in (N, N_long):
        ax.axvline(n, color="0.75", lw=1)
        ax.annotate(f"N = {n:,}", (n, attn_curve.max()), xytext=(4, -14), textcoords="offset points")
    ax.set(title="MACs of one MHA layer, d_model = 512, h = 8", xlabel="sequence length N",
           ylabel="multiply-accumulates (MACs)")
    ax.legend(loc="lower right")
    plt.show()
    """),
    md(r"""
    ## Recap

    - $d_{model}=512$, $h=8$: $d_k=64$; parameters $4 \times 262{,}144 = 1{,}048{,}576$, independent of $h$.
    - $N=100$: $104{,}857{,}600$ projection MACs $+ 10{,}240{,}000$ attention MACs
      $= 115{,}097{,}600$ MACs, about 230 M FLOPs; projections are about $10\times$ the attention core.
    - $N=2000$: about 2.1 B projection MACs against about 4.1 B attention MACs: the quadratic term wins.
    - The terms are equal at exactly $N = 2\,d_{model}$ (1,024 here).
    - An instrumented run multiplies exactly the MACs the formulas predict.

    Next: `04_head_heatmaps` looks inside the $(h, N, N)$ weights these MACs produce.
    """),
]

if __name__ == "__main__":
    write("03_worked_example.ipynb", cells)
