"""Generate notebooks/07_pitfalls.ipynb (then execute it; see nbgen.py)."""

from nbgen import code, md, write

cells = [
    md(r"""
    # 07 · Eight classic mistakes, and what each one breaks

    **You will learn** to recognise, by their numbers, the mistakes people make most often with
    multi-head attention:

    1. scaling the logits by $\sqrt{d_{model}}$ instead of $\sqrt{d_k}$;
    2. believing that more heads cost more parameters or FLOPs;
    3. believing that each head reads only a slice of the input;
    4. dropping the output projection $W_O$;
    5. taking the softmax over the wrong axis;
    6. masking after the softmax instead of before;
    7. splitting heads with a reshape but no transpose;
    8. assuming heads can be spread over devices for free.

    Each wrong version lives in `mha_core.teaching.pitfalls`, next to the right code in `mha_core`. Here both
    run on the same inputs and the damage is measured. The checkers of `mha_core.teaching.exercises` name
    these mistakes when they turn up in your own code.

    **Assumed:** notebooks 01 to 04. Symbols: $N$ tokens, $d_{model}$ width, $h$ heads,
    $d_k = d_v = d_{model}/h$.
    """),
    code("""
    import matplotlib.pyplot as plt
    import numpy as np

    from mha_core import (
        MHAConfig,
        causal_mask,
        count_macs,
        count_params,
        head_contributions,
        head_outputs,
        init_params,
        multi_head_attention,
        scaled_dot_product_attention,
        split_heads,
    )
    from mha_core.teaching import pitfalls as pf
    from mha_core.teaching.exercises import check_attention, check_merge_heads

    rng = np.random.default_rng(0)
    """),
    md(r"""
    ## 1 · Scaling by $\sqrt{d_{model}}$ instead of $\sqrt{d_k}$

    A logit $q \cdot k$ sums $d_k$ products, so its spread grows like $\sqrt{d_k}$; dividing by
    $\sqrt{d_k}$ brings it back to about 1. Dividing by $\sqrt{d_{model}} = \sqrt{h\,d_k}$ shrinks
    it by a further $\sqrt{h}$. Measured on the texts' worked example ($d_{model}=512$, $h=8$,
    $d_k=64$), with the queries and keys from real projections:
    """),
    code("""
    cfg = MHAConfig(512, 8)
    N = 32
    p512 = init_params(cfg, rng)
    X = rng.standard_normal((N, cfg.d_model)).astype(np.float32)  # (N, d_model)
    Qh, Kh, Vh = (split_heads(X @ p512[w], cfg.h) for w in ("W_Q", "W_K", "W_V"))  # (h, N, d_k) each

    raw = Qh @ np.swapaxes(Kh, -1, -2)  # (h, N, N), unscaled logits
    right_out, right_w = scaled_dot_product_attention(Qh, Kh, Vh)  # / sqrt(d_k)
    wrong_out, wrong_w = pf.attention_scaled_by_sqrt_d_model(Qh, Kh, Vh)  # / sqrt(d_model)

    spread_right = float((raw / np.sqrt(cfg.d_k)).std())
    spread_wrong = float((raw / np.sqrt(cfg.d_model)).std())
    ent_right, ent_wrong = (float(pf.attention_entropy(w).mean()) for w in (right_w, wrong_w))
    max_right, max_wrong = float(right_w.max(-1).mean()), float(wrong_w.max(-1).mean())

    assert np.isclose(spread_right / spread_wrong, np.sqrt(cfg.h))  # exactly sqrt(h) = sqrt(8)
    assert ent_wrong > ent_right and max_wrong < max_right  # flatter, less decisive rows
    print(f"{'':16} {'logit std':>9} {'entropy':>8} {'max weight':>10}")
    print(f"{'/ sqrt(d_k)':16} {spread_right:9.3f} {ent_right:8.3f} {max_right:10.3f}")
    print(f"{'/ sqrt(d_model)':16} {spread_wrong:9.3f} {ent_wrong:8.3f} {max_wrong:10.3f}")
    print(f"uniform attention over N={N} keys: entropy log N = {np.log(N):.3f}, max weight 1/N = {1 / N:.3f}")
    """),
    code("""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    for ax, w, title in ((axes[0], right_w, "right: / sqrt(d_k)"),
                         (axes[1], wrong_w, "wrong: / sqrt(d_model)")):
        im = ax.imshow(w[0], cmap="viridis", vmin=0, vmax=float(right_w[0].max()))
        ax.set(title=f"head 0, {title}", xlabel="key position j", ylabel="query position i")
        fig.colorbar(im, ax=ax, label="weight")
    fig.tight_layout()
    plt.show()
    """),
    md(r"""
    The wrong scale pushes every row towards the uniform average. The heads still run, but they
    attend less sharply than the model was designed for.

    ## 2 · "More heads means more parameters and more FLOPs"

    Both are fixed by $d_{model}$. The head count only decides how the same matrices are cut up.
    """),
    code("""
    N_COUNT = 100
    totals = {}
    for h in (1, 2, 8, 32, 128, 512):
        c = MHAConfig(512, h)
        real = sum(a.size for a in init_params(c, rng=0).values())
        totals[h] = (count_params(c)["total"], count_macs(c, N_COUNT)["total"])
        assert real == totals[h][0]
    assert len(set(totals.values())) == 1
    params_512, macs_512 = totals[1]
    print(f"h in {list(totals)}: always {params_512:,} params and {macs_512:,} MACs at N={N_COUNT}")
    """),
    md(r"""
    Only the softmax grows: $h N^2$ exponentials (notebook 05 measures that).

    ## 3 · "Each head reads a slice of the input"

    It does not. Head $i$'s $W_Q^i$ is a column block of $W_Q$, of shape $(d_{model}, d_k)$: it has a
    row for every input feature. The "slice" is in the output of the projection, not in $X$. To see
    it, change one input feature (one column of $X$) at a time, for every one of the $d_{model}$
    features, and record how much each head's output moves. If heads read slices, feature $j$ would
    move only head $\lfloor j / d_k \rfloor$.
    """),
    code("""
    small = MHAConfig(64, 8)
    p = init_params(small, rng=1, dtype=np.float64)
    Xs = np.random.default_rng(2).standard_normal((10, small.d_model))  # (N, d_model)
    base = head_outputs(Xs, p, small.h)  # (h, N, d_k)
    W_Q3 = p["W_Q"][:, 3 * small.d_k:4 * small.d_k]  # (d_model, d_k): head 3's query weights
    assert W_Q3.shape == (small.d_model, small.d_k)

    moved = np.zeros((small.d_model, small.h))  # (input feature j, head i)
    for j in range(small.d_model):
        X2 = Xs.copy()
        X2[:, j] += 1.0  # one input feature, for every token
        moved[j] = np.abs(head_outputs(X2, p, small.h) - base).max(axis=(1, 2))  # (h,)
    assert (moved > 1e-6).all()  # every feature reaches every head
    print(f"W_Q^3 has shape {W_Q3.shape}: all {small.d_model} input features feed head 3")
    print(f"all {moved.size} (feature, head) pairs respond; smallest change {moved.min():.3f}")
    print(f"the slice picture would leave {moved.size - small.d_model} of them at exactly 0")
    """),
    code("""
    fig, ax = plt.subplots(figsize=(5, 4.5))
    im = ax.imshow(moved, cmap="viridis", aspect="auto")
    ax.set(title="Change in each head's output\\nwhen one input feature changes",
           xlabel="head i", ylabel="changed input feature j (column of X)")
    fig.colorbar(im, ax=ax, label="max |change|")
    plt.show()
    """),
    md(r"""
    ## 4 · Dropping $W_O$

    Without the output projection the layer returns the concatenated heads: output columns
    $i\,d_v$ to $(i+1)\,d_v$ are head $i$ and nothing else. We disturb one head at a time (its query
    weights only) and record which output column blocks move.
    """),
    code("""
    concat = pf.multi_head_attention_without_w_o(Xs, p, small.h)  # (N, h*d_v)
    full = multi_head_attention(Xs, p, small.h)  # (N, d_model)
    d_v = small.d_k
    assert np.allclose(concat[:, 3 * d_v:4 * d_v], base[3])  # block 3 is head 3, unmixed

    blocks_without, blocks_with = np.zeros((small.h, small.h)), np.zeros((small.h, small.h))
    for i in range(small.h):
        p2 = dict(p, W_Q=p["W_Q"].copy())
        p2["W_Q"][:, i * small.d_k:(i + 1) * small.d_k] *= 2.0  # disturb head i only
        d_wo = np.abs(pf.multi_head_attention_without_w_o(Xs, p2, small.h) - concat)  # (N, d_model)
        d_w = np.abs(multi_head_attention(Xs, p2, small.h) - full)  # (N, d_model)
        blocks_without[i] = d_wo.reshape(-1, small.h, d_v).max(axis=(0, 2))  # per output block
        blocks_with[i] = d_w.reshape(-1, small.h, d_v).max(axis=(0, 2))
    off_diagonal = ~np.eye(small.h, dtype=bool)
    assert (blocks_without[off_diagonal] == 0).all() and (np.diag(blocks_without) > 0).all()
    assert (blocks_with > 0).all()
    print("without W_O: disturbing head i moves output block i only")
    print(f"with W_O: every block moves (smallest change {blocks_with.min():.2e})")
    """),
    code("""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    for ax, m, title in ((axes[0], blocks_without, "without W_O"), (axes[1], blocks_with, "with W_O")):
        im = ax.imshow(m, cmap="viridis")
        ax.set(title=title, xlabel="output column block", ylabel="disturbed head i")
        fig.colorbar(im, ax=ax, label="max |change|")
    fig.tight_layout()
    plt.show()
    """),
    md(r"""
    $W_O$ is the only place where the heads exchange information. Without it each head writes to
    its own block of the residual stream and never mixes with the others.

    ## 5 · Softmax over the wrong axis

    The scores are $(N_q, N_k)$: one row per query. Each row must be a distribution over the keys.
    Taking the softmax over axis $-2$ normalises the columns instead.
    """),
    code("""
    q, k, v = (rng.standard_normal((small.h, 10, small.d_k)) for _ in range(3))  # (h, N, d_k)
    good_out, good_w = scaled_dot_product_attention(q, k, v)
    bad_out, bad_w = pf.attention_softmax_over_queries(q, k, v)
    rows, cols = bad_w.sum(axis=-1), bad_w.sum(axis=-2)  # (h, N_q), (h, N_k)
    assert np.allclose(cols, 1.0) and not np.allclose(rows, 1.0)
    assert np.allclose(good_w.sum(axis=-1), 1.0)
    rel = np.linalg.norm(bad_out - good_out) / np.linalg.norm(good_out)
    print(f"wrong axis: row sums range from {rows.min():.2f} to {rows.max():.2f}; every column sums to 1")
    print(f"relative error of the output: {rel:.0%}")
    """),
    md(r"""
    ## 6 · Masking after the softmax

    The causal mask must turn the forbidden logits into $-\infty$ *before* the softmax. Zeroing the
    forbidden weights *after* it breaks two things:

    - the rows no longer sum to 1;
    - the surviving weights were divided by a sum that included the future keys, so the future still
      leaks into the past.

    The leak shows if we change only the last token's key and value. A causal layer must leave every
    earlier output unchanged.
    """),
    code("""
    mask = causal_mask(10)  # (N, N), True = may attend
    _, after_w = pf.attention_mask_after_softmax(q, k, v, mask)
    row_sums = after_w.sum(axis=-1)  # (h, N)
    assert (row_sums[:, :-1] < 1).all() and np.allclose(row_sums[:, -1], 1.0)

    k2, v2 = k.copy(), v.copy()
    k2[:, -1] += 3.0  # only the last token changes
    v2[:, -1] += 3.0
    leak_right = np.abs(scaled_dot_product_attention(q, k2, v2, mask)[0] - scaled_dot_product_attention(q, k, v, mask)[0])
    leak_wrong = np.abs(pf.attention_mask_after_softmax(q, k2, v2, mask)[0] - pf.attention_mask_after_softmax(q, k, v, mask)[0])
    assert (leak_right[:, :-1] == 0).all()  # the past is untouched
    assert leak_wrong[:, :-1].max() > 0.01  # the future leaked
    print(f"row sums after masking late: {row_sums.min():.2f} to {row_sums.max():.2f} (should all be 1)")
    print(f"earlier outputs moved by the last token: right {leak_right[:, :-1].max():.1f}, "
          f"wrong {leak_wrong[:, :-1].max():.3f}")
    """),
    md(r"""
    The checker of `mha_core.teaching.exercises` recognises this mistake when it meets it:
    """),
    code("""
    verdict = check_attention(pf.attention_mask_after_softmax)
    assert verdict.pitfall == "mask_after_softmax"
    verdict
    """),
    md(r"""
    ## 7 · Splitting heads with a reshape but no transpose

    `split_heads` reshapes $(N, h\,d_k) \to (N, h, d_k)$ and then swaps the first two axes. A single
    reshape straight to $(h, N, d_k)$ has the same shape, but it reads the numbers in memory
    order: "head 0" gets the first tokens' whole rows, cut into pieces. Label every number of $X$
    by the token it came from and look where the tokens land.
    """),
    code("""
    N_SHOW, H_SHOW, DK_SHOW = 6, 3, 4
    token_of = np.repeat(np.arange(N_SHOW), H_SHOW * DK_SHOW).reshape(N_SHOW, H_SHOW * DK_SHOW)  # (N, d_model)
    right_split = split_heads(token_of, H_SHOW)  # (h, N, d_k)
    wrong_split = pf.split_heads_without_transpose(token_of, H_SHOW)  # (h, N, d_k), same shape
    assert right_split.shape == wrong_split.shape == (H_SHOW, N_SHOW, DK_SHOW)
    assert (right_split == np.arange(N_SHOW)[None, :, None]).all()  # row n of every head is token n
    misplaced = float((wrong_split != right_split).mean())
    assert misplaced > 0.5
    print(f"tokens in head 0, row by row (right): {right_split[0, :, 0].tolist()}")
    print(f"tokens in head 0, row by row (wrong): {wrong_split[0, :, 0].tolist()}")
    print(f"{misplaced:.0%} of the numbers end up in a row belonging to another token")
    """),
    code("""
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for ax, s, title in ((axes[0], right_split, "split_heads (right)"),
                         (axes[1], wrong_split, "reshape only (wrong)")):
        im = ax.imshow(s.reshape(-1, DK_SHOW), cmap="cividis", aspect="auto")
        ax.set(title=title, xlabel="feature within the head (d_k)", ylabel="head h, then row n")
        ax.set_yticks(np.arange(0, H_SHOW * N_SHOW, N_SHOW), [f"head {i}" for i in range(H_SHOW)])
        fig.colorbar(im, ax=ax, label="source token")
    fig.tight_layout()
    plt.show()
    """),
    md(r"""
    Because the shape is right, nothing crashes. On real numbers the error in one split tensor is as
    large as the tensor itself. Below, `multi_head_attention` is compared with
    `pitfalls.multi_head_attention_without_transpose`, the same layer with the reshape-only split
    and merge.
    """),
    code("""
    Qs, Ks, Vs = (Xs @ p[w] for w in ("W_Q", "W_K", "W_V"))  # (N, d_model) each
    split_err = np.linalg.norm(pf.split_heads_without_transpose(Qs, small.h) - split_heads(Qs, small.h)) / np.linalg.norm(Qs)
    print(f"relative error of the split Q: {split_err:.0%}")

    layer_outputs = {"right": multi_head_attention(Xs, p, small.h),  # (N, d_model)
                     "wrong": pf.multi_head_attention_without_transpose(Xs, p, small.h)}  # (N, d_model)
    layer_err = np.linalg.norm(layer_outputs["wrong"] - layer_outputs["right"]) / np.linalg.norm(layer_outputs["right"])
    assert layer_err > 0.5
    print(f"relative error of the layer's output with reshape-only split and merge: {layer_err:.0%}")
    """),
    md(r"""
    ### Exercise: merge the heads back

    `merge_heads` takes $(h, N, d_v)$ back to $(N, h\,d_v)$. The checker runs an attempt on seeded
    inputs and compares it with `mha_core` and with the known mistakes. A first attempt, reshape
    only:
    """),
    code("""
    attempt = check_merge_heads(lambda heads: heads.reshape(*heads.shape[:-3], heads.shape[-2], -1))
    assert not attempt.ok and attempt.pitfall == "merge_without_transpose"
    attempt
    """),
    md(r"""
    The fix: bring the head axis back beside $d_v$ first, then reshape.
    """),
    code("""
    attempt = check_merge_heads(
        lambda heads: np.swapaxes(heads, -3, -2).reshape(*heads.shape[:-3], heads.shape[-2], -1)
    )
    assert attempt.ok
    attempt
    """),
    md(r"""
    ## 8 · "Heads are independent, so spread them over devices for free"

    Inside the softmax-and-weighted-sum core the heads are independent. Around it they are not:
    every head reads all of $X$, and $W_O$ adds all the heads together. Put heads 0 to 3 on one
    device and heads 4 to 7 on another. Each device can compute its heads' contributions
    $\text{head}_i W_O^i$, but that is only a partial output. The real output is the sum of both
    partials, so the devices must exchange a full $(N, d_{model})$ tensor (an all-reduce) in every
    layer.
    """),
    code("""
    contrib = head_contributions(Xs, p, small.h)  # (h, N, d_model): head_i @ W_O^i
    half = small.h // 2
    device_0, device_1 = contrib[:half].sum(axis=0), contrib[half:].sum(axis=0)  # (N, d_model) each
    assert not np.allclose(device_0, full)  # one device alone has the wrong output
    assert np.allclose(device_0 + device_1, full)  # only the sum is right
    gap = np.linalg.norm(device_0 - full) / np.linalg.norm(full)
    print(f"device 0's partial output is off by {gap:.0%}; the sum of both partials is exact")
    print(f"exchanged per layer: N x d_model = {device_0.size:,} numbers")
    """),
    md(r"""
    At the realistic size of notebook 06 (32 layers, $d_{model}=4096$) with a 2,048-token prompt in
    fp16, that is 16 MiB per layer and 512 MiB per forward pass, on top of giving every device all of
    $X$. Splitting heads across devices is common practice (tensor parallelism), but it is not free.
    """),
    code("""
    LAYERS, D_BIG, N_PROMPT = 32, 4096, 2048
    fp16 = np.dtype(np.float16).itemsize
    per_layer = N_PROMPT * D_BIG * fp16
    assert per_layer == 16 * 2**20 and LAYERS * per_layer == 512 * 2**20
    print(f"all-reduce of N x d_model per layer: {per_layer / 2**20:.0f} MiB; "
          f"{LAYERS} layers: {LAYERS * per_layer / 2**20:,.0f} MiB per forward")
    """),
    md(r"""
    ## Recap

    | mistake | what the numbers showed |
    |---|---|
    | $\sqrt{d_{model}}$ scale | logits shrink by exactly $\sqrt{h}$; flatter rows (higher entropy, lower max weight) |
    | more heads cost more | parameters and MACs identical for $h$ from 1 to 512 |
    | heads read slices of $X$ | each of the $d_{model}$ input features moves every head |
    | no $W_O$ | a disturbed head moves only its own output block |
    | softmax over queries | columns sum to 1, rows do not; large output error |
    | mask after softmax | rows sum below 1 and the last token changes earlier outputs |
    | reshape without transpose | most numbers land in another token's row; the layer's output is far off |
    | heads on devices for free | each device has only a partial sum; $N \times d_{model}$ must be exchanged per layer |

    The checkers in `mha_core.teaching.exercises` recognise several of these by name (`PITFALLS` lists them).
    """),
]

if __name__ == "__main__":
    print(write("07_pitfalls.ipynb", cells))
