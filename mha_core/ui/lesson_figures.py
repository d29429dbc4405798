"""The lessons' figures, drawn from the numbers a lesson cell computed.

A lesson cell computes and prints; the plotting set-up (sizes, colours, ticks) and the alt text
that describes the figure to a screen reader live here, so the cell reads like a textbook
example: ``show_weights_bar(words, weights)``. Every function draws with matplotlib, writes an
alt text from the same numbers, and displays the figure with :func:`mha_core.ui.viz.show_figure`
(an ``<img>`` with ``alt``, text at least 10 pt on a projector). Grouped by notebook.
"""

from __future__ import annotations

import time
import timeit
from collections.abc import Mapping, Sequence
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle
from matplotlib.ticker import FuncFormatter, NullLocator
from threadpoolctl import threadpool_limits

from ..core.attention import softmax
from ..core.config import MHAConfig
from ..core.decode import KVCache, decode_step
from ..core.validate import check_layer
from .viz import plain_log_ticks, show_figure

GiB = 2**30
ON_RAMP_PT = 15  # notebook 00 draws large, for a projector


def _check_same_length(**arrays: Sequence) -> None:
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"expected arrays of one length, got lengths {lengths}")


def _plain_number_ticks(ax) -> None:
    """Only the labelled ticks, written 0.01 rather than 10^-2 in small type."""
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))


# -- notebook 00: the on-ramp ----------------------------------------------------------------------

def show_weights_bar(words: Sequence[str], weights: np.ndarray) -> None:
    """One query's attention weights (N,), one bar per key word."""
    _check_same_length(words=words, weights=weights)
    with plt.rc_context({"font.size": ON_RAMP_PT}):
        fig, ax = plt.subplots(figsize=(7, 3.8))
        ax.bar(list(words), weights, color=plt.cm.viridis(0.3))
        ax.set(title="One query's attention weights", xlabel="key token $j$", ylabel="weight $a_j$",
               ylim=(0, 1))
        fig.tight_layout()
    top, second = np.argsort(weights)[::-1][:2]
    show_figure(fig, f"Bar chart of one query's {len(words)} attention weights, one bar per word. The "
                     f"tallest bars are '{words[top]}' at {weights[top]:.2f} and '{words[second]}' at "
                     f"{weights[second]:.2f}; the others share the remaining "
                     f"{1 - weights[top] - weights[second]:.2f}.")


def show_scaling(d_ks: Sequence[int], var_raw, var_scaled, top_raw, top_scaled) -> None:
    """Logit variance and the largest softmax weight against d_k, with and without the scale."""
    _check_same_length(d_ks=d_ks, var_raw=var_raw, var_scaled=var_scaled, top_raw=top_raw,
                       top_scaled=top_scaled)
    c_raw, c_scaled = plt.cm.viridis(0.15), plt.cm.viridis(0.7)
    with plt.rc_context({"font.size": ON_RAMP_PT}):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8.3, 4.4))
        ax1.loglog(d_ks, var_raw, "o-", color=c_raw, label="$q \\cdot k$")
        ax1.loglog(d_ks, var_scaled, "s--", color=c_scaled, label="$q \\cdot k / \\sqrt{d_k}$")
        ax1.set(title="Logit variance", xlabel="$d_k$", ylabel="variance")
        ax2.semilogx(d_ks, top_raw, "o-", color=c_raw, label="unscaled")
        ax2.semilogx(d_ks, top_scaled, "s--", color=c_scaled, label="scaled")
        ax2.set(title="Largest softmax weight", xlabel="$d_k$", ylabel="mean max weight", ylim=(0, 1.05))
        ax1.legend()
        ax2.legend()
        plain_log_ticks(ax1, ax2)
        fig.tight_layout()
    show_figure(fig, f"Two line charts against d_k from {d_ks[0]} to {d_ks[-1]} on a log axis. Left: the "
                     f"variance of the raw dot products grows from {var_raw[0]:.1f} to {var_raw[-1]:,.0f}, "
                     f"in step with d_k, while the scaled ones stay near 1. Right: without scaling the "
                     f"largest softmax weight climbs from {top_raw[0]:.2f} to {top_raw[-1]:.2f} "
                     f"(one key takes everything); with scaling it stays near {top_scaled[-1]:.2f}.")


def show_positional_encoding(pe: np.ndarray) -> None:
    """The sinusoidal positional encoding (N, d_model) as a heatmap, positions across."""
    n, d = pe.shape
    with plt.rc_context({"font.size": ON_RAMP_PT}):
        fig, ax = plt.subplots(figsize=(8, 4.2))
        im = ax.imshow(pe.T, cmap="viridis", aspect="auto", vmin=-1, vmax=1)
        fig.colorbar(im, ax=ax, label="value")
        ax.set(title="Positional encoding", xlabel="position $p$", ylabel="dimension $i$ of $d_{model}$")
        fig.tight_layout()
    show_figure(fig, f"Heatmap of the sinusoidal positional encoding for {n} positions (x axis) and {d} "
                     "dimensions (y axis), values from -1 to 1 in viridis. The top rows oscillate fast "
                     "along the positions, lower rows ever more slowly, so each position gets its own "
                     "pattern.")


def show_causal_mask(mask: np.ndarray, words: Sequence[str]) -> None:
    """The (N, N) causal mask as a two-colour grid labelled with the words."""
    n = len(words)
    if mask.shape != (n, n):
        raise ValueError(f"mask must have shape ({n}, {n}) for {n} words, got {mask.shape}")
    two = ListedColormap([plt.cm.cividis(0.05), plt.cm.cividis(0.95)])
    with plt.rc_context({"font.size": ON_RAMP_PT}):
        fig, ax = plt.subplots(figsize=(8.3, 5), layout="constrained")
        ax.imshow(mask, cmap=two, vmin=0, vmax=1)
        ax.set_xticks(range(n), words, rotation=45)
        ax.set_yticks(range(n), words)
        ax.set(title="Causal mask", xlabel="key $j$ (read)", ylabel="query $i$ (reading)")
        fig.legend(handles=[Patch(color=two(1), label="may attend ($j \\leq i$)"),
                            Patch(color=two(0), label="blocked (future)")], loc="outside right upper")
    show_figure(fig, f"A {n} by {n} grid, queries down, keys across, labelled with the words "
                     f"'{' '.join(words)}'. Cells on and below the diagonal are yellow (may attend); "
                     f"cells above it, the future, are dark blue (blocked).")


def show_residual_stream() -> None:
    """A diagram: attention and the FFN each read the residual stream and add back to it."""
    with plt.rc_context({"font.size": ON_RAMP_PT}):
        fig, ax = plt.subplots(figsize=(8.3, 3.4))
        ax.set(xlim=(0, 10), ylim=(0, 3), title="The residual stream: each block reads it and adds back")
        ax.axis("off")
        ax.add_patch(FancyArrowPatch((0.2, 0.8), (9.8, 0.8), arrowstyle="-|>", mutation_scale=25, lw=3,
                                     color=plt.cm.viridis(0.2)))
        ax.text(0.2, 0.2, "residual stream $x$, shape $(N, d_{model})$")
        for x0, name in ((1.8, "multi-head\nattention"), (6.0, "FFN")):
            ax.add_patch(Rectangle((x0, 1.6), 2.3, 1.0, facecolor=plt.cm.viridis(0.75), edgecolor="black"))
            ax.text(x0 + 1.15, 2.1, name, ha="center", va="center")
            ax.add_patch(FancyArrowPatch((x0 + 0.2, 0.8), (x0 + 0.2, 1.6), arrowstyle="-|>", mutation_scale=15))
            ax.add_patch(FancyArrowPatch((x0 + 2.1, 1.6), (x0 + 2.1, 0.8), arrowstyle="-|>", mutation_scale=15))
            ax.text(x0 + 2.25, 1.05, "+", fontsize=18, fontweight="bold")
    show_figure(fig, "Diagram: a long arrow from left to right is the residual stream x of shape "
                     "(N, d_model). Two blocks sit above it, multi-head attention and then the FFN; "
                     "each has an arrow down from the stream into the block (it reads) and an arrow "
                     "back to the stream marked with a plus (it adds its output).")


# -- notebook 01: one head -------------------------------------------------------------------------

def show_where_output_moves(delta_no_mix: np.ndarray, delta_mixed: np.ndarray, *, changed_head: int) -> None:
    """Two yes/no maps (N, d_model) of the output entries that moved when one head's weights
    changed: with W_O replaced by the identity, and with the real W_O."""
    if delta_no_mix.shape != delta_mixed.shape or delta_no_mix.ndim != 2:
        raise ValueError(f"expected two (N, d_model) masks of one shape, got {delta_no_mix.shape} and "
                         f"{delta_mixed.shape}")
    yes_no = ListedColormap(plt.cm.cividis([0.1, 0.9]))  # two colours: unchanged, changed
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6), constrained_layout=True, sharey=True)
    for ax, delta, title in ((axes[0], delta_no_mix, "W_O = identity"), (axes[1], delta_mixed, "the real W_O")):
        ax.imshow(delta, cmap=yes_no, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.set(title=title, xlabel="output column (of d_model)")
    axes[0].set_ylabel("token (of N)")
    fig.legend(handles=[Patch(color=yes_no(1), label="changed"), Patch(color=yes_no(0), label="unchanged")],
               loc="outside lower center", ncols=2)
    fig.suptitle(f"Perturbing head {changed_head}'s W_Q, W_K, W_V: where the output moves")
    cols = np.flatnonzero(delta_no_mix.any(axis=0))
    d_model = delta_mixed.shape[1]
    moved = int(delta_mixed.any(axis=0).sum())
    show_figure(fig, alt=(
        f"Two yes/no maps of the output, tokens down and the {d_model} output columns across. With W_O "
        f"replaced by the identity only columns {cols.min()} to {cols.max()}, head {changed_head}'s block, "
        f"changed; with the real W_O {moved} of the {d_model} columns changed."))


# -- notebook 05: cost -----------------------------------------------------------------------------

def _head_ticks(ax, ticks: Sequence[int]) -> None:
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(list(ticks), [str(t) for t in ticks])


def show_flat_in_h(heads: Sequence[int], params_by_h: Mapping[int, int], macs_by_h: Mapping[int, dict],
                   n: int, d_model: int) -> None:
    """Parameters and MACs against h (flat), and the softmax's exponentials (rising)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8.3, 3.8), constrained_layout=True)
    ax1.plot(heads, [params_by_h[h] for h in heads], "o-", color=plt.cm.viridis(0.2), label="parameters")
    ax1.plot(heads, [macs_by_h[h]["total"] for h in heads], "s-", color=plt.cm.viridis(0.6), label=f"MACs, N={n}")
    ax1.set(xscale="log", yscale="log", xlabel=f"h (heads), d_model = {d_model}", ylabel="count",
            title="Params and MACs: flat in h")
    ax2.plot(heads, [macs_by_h[h]["softmax_exps"] for h in heads], "o-", color=plt.cm.viridis(0.85))
    ax2.set(xscale="log", yscale="log", xlabel="h (heads)", ylabel="exponentials",
            title=f"Softmax work = h·N² (N={n})")
    for ax in (ax1, ax2):
        _head_ticks(ax, heads)
    ax1.legend()
    plain_log_ticks(ax1, ax2)
    first, last = heads[0], heads[-1]
    show_figure(fig, alt=(
        f"Left: parameters ({params_by_h[first]:,}) and MACs at N={n} ({macs_by_h[first]['total']:,}) against h "
        f"from {first} to {last} on log axes: two flat lines. Right: softmax exponentials against h: a "
        f"straight rising line, from {macs_by_h[first]['softmax_exps']:,} at h={first} to "
        f"{macs_by_h[last]['softmax_exps']:,} at h={last}."))


def show_macs_against_n(ns: np.ndarray, proj: np.ndarray, attn: np.ndarray, crossover: int,
                        d_model: int) -> None:
    """The projection (slope 1) and attention-core (slope 2) MACs against N, log-log."""
    _check_same_length(ns=ns, proj=proj, attn=attn)
    fig, ax = plt.subplots(figsize=(7, 4.2), constrained_layout=True)
    ax.loglog(ns, proj, color=plt.cm.viridis(0.2), label="projections: 4·N·d_model²")
    ax.loglog(ns, attn, color=plt.cm.viridis(0.7), label="attention core: 2·N²·d_model")
    ax.loglog(ns, proj + attn, "k--", lw=1, label="total")
    ax.axvline(crossover, color="grey", ls=":")
    ax.annotate("N = 2·d_model", (crossover, proj.min()), rotation=90, ha="right", va="bottom")
    ax.set(xlabel="N (tokens)", ylabel="MACs per layer", title=f"MACs against N (d_model={d_model}, any h)")
    ax.legend()
    plain_log_ticks(ax)
    both = 2 * crossover**2 * d_model
    show_figure(fig, alt=(
        f"Log-log plot of MACs against N from {ns[0]} to {ns[-1]:,}: the projection line rises with slope 1, "
        f"the attention-core line with slope 2, and they cross at N = 2·d_model = {crossover:,}, where "
        f"both are {both:,} MACs."))


def show_clock(heads: Sequence[int], timing: Mapping[int, dict], spread: Mapping[int, dict], matmul_flops: int,
               n: int, d_model: int) -> None:
    """The fastest wall times against h, with error bars up to the median run, and the matmuls'
    GFLOP/s against d_k (one run's measurements, see ``time_attention_parts``)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8.3, 3.9), constrained_layout=True)
    for key, marker, shade in (("forward", "o-", 0.15), ("matmuls", "s-", 0.5), ("softmax", "^-", 0.85)):
        ms = np.array([timing[h][key] for h in heads])
        up = np.array([spread[h][key] for h in heads]) * ms  # the median run's distance above the fastest
        ax1.errorbar(heads, ms, yerr=[np.zeros_like(ms), up], fmt=marker, capsize=3, color=plt.cm.viridis(shade),
                     label=key)
    ax1.set(xscale="log", yscale="log", xlabel=f"h (heads), d_model = {d_model}", ylabel="fastest wall time (ms)",
            title=f"Same MACs, other clock (N={n})")
    ax1.legend()
    d_ks = [d_model // h for h in heads]
    gflops = np.array([matmul_flops / (timing[h]["matmuls"] * 1e-3) / 1e9 for h in heads])
    slow = np.array([matmul_flops / (timing[h]["matmuls"] * (1 + spread[h]["matmuls"]) * 1e-3) / 1e9 for h in heads])
    ax2.errorbar(d_ks, gflops, yerr=[gflops - slow, np.zeros_like(gflops)], fmt="o-", capsize=3,
                 color=plt.cm.viridis(0.5))
    ax2.set(xscale="log", xlabel="d_k = d_model / h", ylabel="GFLOP/s of QK^T and AV", title="Small d_k: less speed")
    for ax, ticks in ((ax1, heads), (ax2, d_ks)):
        _head_ticks(ax, ticks)
    ax2.invert_xaxis()
    plain_log_ticks(ax1, ax2)
    first, last = heads[0], heads[-1]
    show_figure(fig, alt=(
        f"Left: fastest wall time against h from {first} to {last} on log axes for the forward pass (from "
        f"{timing[first]['forward']:.1f} to {timing[last]['forward']:.1f} ms), the two attention matmuls and the "
        f"softmax, each with an error bar up to the median run. Right: GFLOP/s of the attention matmuls against "
        f"d_k from {d_ks[0]} to {d_ks[-1]}, from {gflops[0]:.1f} to {gflops[-1]:.1f}. Measured in this run; "
        f"times vary by machine and load."))


def fastest_ms(runs: Mapping, rounds: int = 15) -> dict:
    """The fastest wall time (ms) of each ``fn()`` in ``runs`` (key -> fn) over ``rounds``
    interleaved rounds, and its spread: how far the median round lies above the fastest, as a
    fraction of the fastest. Returns key -> (ms, spread).

    Timed as notebook 06's ``profile_decode_step`` times: BLAS on one thread (no thread waits for
    a core another program holds) and the fastest round kept (the one least disturbed). Short
    calls are repeated so that one sample lasts at least 2 ms.
    """
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f"rounds must be a positive int, got {rounds!r}")
    numbers = {}
    samples = {key: [] for key in runs}
    with threadpool_limits(limits=1, user_api="blas"):
        for key, fn in runs.items():  # warm up, and find how many calls make a sample of >= 2 ms
            once = timeit.timeit(fn, number=1)
            numbers[key] = max(1, int(2e-3 / max(once, 1e-9)))
        for _ in range(rounds):
            for key, fn in runs.items():  # interleaved: noise hits every key alike
                samples[key].append(1e3 * timeit.timeit(fn, number=numbers[key]) / numbers[key])
    result = {}
    for key, ms in samples.items():
        best, med = float(np.min(ms)), float(np.median(ms))
        result[key] = (best, (med - best) / best)
    return result


def clearly_apart(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two timings ``(ms, spread)`` of ``fastest_ms`` differ by more than their spreads
    added up (in ms): the lessons' rule for calling one faster than the other."""
    (t_a, s_a), (t_b, s_b) = a, b
    return abs(t_a - t_b) > s_a * t_a + s_b * t_b


def time_attention_parts(x: np.ndarray, heads: Sequence[int], *, rounds: int = 15,
                         seed: int = 0) -> tuple[dict, dict]:
    """For each h of ``heads``: the fastest ms of the layer's forward pass on ``x`` (N, d_model), of
    the two attention matmuls (QKᵀ and the weights times V, on random (h, N, d_k) arrays) and of the
    softmax over (h, N, N), with their spreads (see ``fastest_ms``: one BLAS thread, fastest round).

    Returns ``(timing, spread)``, each ``{h: {"forward": ..., "matmuls": ..., "softmax": ...}}``;
    the matmuls' spread is the two matmuls' spreads in ms added up, over their time.
    """
    from mha_core import init_params, multi_head_attention

    n, d_model = x.shape
    rng = np.random.default_rng(seed)
    runs = {}
    for h in heads:
        p = init_params(MHAConfig(d_model, h), rng=h)
        d_k = d_model // h
        q, k_t, v = (rng.standard_normal(shape).astype(np.float32)
                     for shape in ((h, n, d_k), (h, d_k, n), (h, n, d_k)))
        weights = softmax(rng.standard_normal((h, n, n)).astype(np.float32))  # (h, N, N)
        runs[h, "forward"] = partial(multi_head_attention, x, p, h)
        runs[h, "QK^T"] = partial(np.matmul, q, k_t)  # (h, N, d_k) @ (h, d_k, N) -> (h, N, N)
        runs[h, "AV"] = partial(np.matmul, weights, v)  # (h, N, N) @ (h, N, d_k) -> (h, N, d_k)
        runs[h, "softmax"] = partial(softmax, weights)
    measured = fastest_ms(runs, rounds)
    timing, spread = {}, {}
    for h in heads:
        (qk, s_qk), (av, s_av) = measured[h, "QK^T"], measured[h, "AV"]
        timing[h] = {"forward": measured[h, "forward"][0], "matmuls": qk + av, "softmax": measured[h, "softmax"][0]}
        spread[h] = {"forward": measured[h, "forward"][1], "matmuls": (s_qk * qk + s_av * av) / (qk + av),
                     "softmax": measured[h, "softmax"][1]}
    return timing, spread


# -- notebook 11: long context ---------------------------------------------------------------------

def show_score_growth(ns: np.ndarray, h: int, d_model: int, bytes_per_number: int) -> None:
    """Bytes of the (h, N, N) scores (slope 2) and of Q, K, V (slope 1) against N, log-log."""
    scores = h * ns.astype(float) ** 2 * bytes_per_number / GiB
    qkv = 3 * ns * d_model * bytes_per_number / GiB
    with plt.rc_context({"font.size": 11}):
        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        colours = plt.cm.viridis([0.15, 0.65])
        ax.plot(ns, scores, "o-", color=colours[0], label="scores (h, N, N)")
        ax.plot(ns, qkv, "s-", color=colours[1], label="Q, K and V, 3 x (N, d_model)")
        ax.set(xscale="log", yscale="log", xlabel="N (tokens)", ylabel="memory (GiB)",
               title=f"One layer, h = {h}, d_model = {d_model}, {8 * bytes_per_number}-bit floats")
        ticks = ns[::2]
        ax.set_xticks(ticks, [f"{n // 1024}k" if n >= 1024 else str(n) for n in ticks])
        _plain_number_ticks(ax)
        ax.legend()
        fig.tight_layout()
    show_figure(fig, f"Log-log line chart of memory against N from {ns[0]:,} to {ns[-1]:,} tokens: the scores "
                     f"rise with slope 2 to {scores[-1]:,.0f} GiB, Q, K and V with slope 1 to {qkv[-1]:.2f} GiB.")


def show_peak_memory(lengths: Sequence[int], peaks: Mapping[str, Sequence[float]], h: int, d_k: int) -> None:
    """Measured peak memory (MiB) of each attention path against N, log-log."""
    for label, ys in peaks.items():
        _check_same_length(lengths=lengths, **{label.split()[0]: ys})
    with plt.rc_context({"font.size": 11}):
        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        for (label, ys), colour, marker in zip(peaks.items(), plt.cm.viridis([0.15, 0.65]), "os", strict=False):
            ax.plot(lengths, ys, marker + "-", color=colour, label=label)
        ax.set(xscale="log", yscale="log", xlabel="N (tokens)", ylabel="peak memory (MiB)",
               title=f"Peak memory of one attention call, h = {h}, d_k = {d_k}")
        ax.set_xticks(list(lengths), [f"{n:,}" for n in lengths])
        _plain_number_ticks(ax)
        ax.legend()
        fig.tight_layout()
    lines = "; ".join(f"{label} from {ys[0]:.1f} to {ys[-1]:.1f} MiB" for label, ys in peaks.items())
    show_figure(fig, f"Log-log line chart of peak memory against N from {lengths[0]:,} to {lengths[-1]:,}: "
                     f"{lines}.")


# -- notebook 03: the worked example ---------------------------------------------------------------

def show_worked_example_macs(ns: np.ndarray, proj: np.ndarray, attn: np.ndarray, *, d_model: int, h: int,
                             n_star: int, marks: Sequence[int]) -> None:
    """One layer's projection and attention-core MACs against N, the crossover and ``marks`` lines."""
    _check_same_length(ns=ns, proj=proj, attn=attn)
    colors = plt.cm.viridis([0.15, 0.7])
    fig, ax = plt.subplots(figsize=(7.5, 4.5), constrained_layout=True)
    ax.loglog(ns, proj, color=colors[0], lw=2, label="projections 4·N·d_model²  (∝ N)")
    ax.loglog(ns, attn, color=colors[1], lw=2, label="attention core 2·N²·d_model  (∝ N²)")
    at_star = 4 * n_star * d_model**2
    ax.axvline(n_star, color="0.4", ls="--", lw=1)
    ax.plot([n_star], [at_star], "o", color="black")
    ax.annotate(f"crossover N = 2·d_model = {n_star:,}", (n_star, at_star),
                xytext=(-12, 10), textcoords="offset points", ha="right")
    for n in marks:
        ax.axvline(n, color="0.75", lw=1)
        ax.annotate(f"N = {n:,}", (n, attn.max()), xytext=(4, -14), textcoords="offset points")
    ax.set(title=f"MACs of one MHA layer, d_model = {d_model}, h = {h}", xlabel="sequence length N",
           ylabel="multiply-accumulates (MACs)")
    ax.legend(loc="lower right")
    plain_log_ticks(ax)
    ratios = "; ".join(
        f"at N = {n:,} the projections are {4 * d_model / (2 * n):.1f} times the attention core" if 2 * n < 4 * d_model
        else f"at N = {n:,} the attention core is {2 * n / (4 * d_model):.2f} times the projections" for n in marks)
    show_figure(fig, alt=(
        f"Log-log plot of the MACs of one layer (d_model = {d_model}, h = {h}) against N from {ns[0]} to "
        f"{ns[-1]:,}: the projection line grows like N, the attention-core line like N squared; they cross at "
        f"N = 2·d_model = {n_star:,}. {ratios[0].upper() + ratios[1:]}."))


# -- notebook 06: the KV cache ---------------------------------------------------------------------

def show_kv_cache_sizes(n_kvs: Sequence[int], gib: Sequence[float], *, n_tokens: int, d_model: int, n_heads: int,
                        layers: int) -> None:
    """The KV cache (GiB) of one model for each number of key/value heads ``n_kvs``, one bar each."""
    _check_same_length(n_kvs=n_kvs, gib=gib)
    fig, ax = plt.subplots(figsize=(7, 3.8), constrained_layout=True)
    names = [MHAConfig(d_model, n_heads, n_kv_heads=n).kind for n in n_kvs]
    bars = ax.bar([f"{name}\nn_kv={n}" for name, n in zip(names, n_kvs, strict=True)], gib,
                  color=plt.cm.viridis(np.linspace(0.15, 0.85, len(n_kvs))))
    ax.bar_label(bars, [f"{g:g} GiB" for g in gib], padding=2)
    ax.set(ylabel="KV cache (GiB)", ylim=(0, 1.15 * max(gib)), xlabel=f"key/value heads n_kv (h = {n_heads} query heads)",
           title=f"KV cache at N = {n_tokens:,}: {layers} layers, d_model = {d_model}, fp16")
    show_figure(fig, alt=(
        f"Bar chart of the KV cache of a {layers}-layer model with d_model {d_model} and {n_heads} query heads at "
        f"{n_tokens:,} tokens in fp16, for n_kv = {', '.join(map(str, n_kvs))}: "
        + ", ".join(f"{g:g} GiB" for g in gib) + ". Each halving of n_kv halves the cache."))


EVICT_BYTES = 64 * 2**20  # more than any processor cache: reading it pushes the step's arrays out
DECODE_STAGES = ("projections", "scores q·Kᵀ", "softmax", "weights·V", "checks + cache write")


def profile_decode_step(x_t: np.ndarray, params: dict, n_heads: int, cache: KVCache, *, n_kv_heads: int,
                        repeats: int = 30) -> dict[str, float]:
    """Time one ``decode_step`` after the ``cache.length`` cached tokens, and each of its stages (ms).

    The stages are the calls ``decode_step`` makes, timed one by one on the same arrays:
    ``projections`` (the four ``x_t @ W``, which read every weight once), ``scores q·Kᵀ`` (reads
    the cached keys), ``softmax`` (``h·t`` exponentials), ``weights·V`` (reads the cached values)
    and ``checks + cache write`` (the argument checks and storing the new key and value).

    How it is timed: the fastest of ``repeats`` runs of each (the run least disturbed by other
    programs), interleaved; before each run a
    64 MiB buffer is read and written, so that the step's arrays come from main memory, as in a
    real model whose other layers push them out of the processor's caches between two tokens;
    BLAS runs on one thread, so that the stages add up to the step and no thread waits for a core
    that another program holds. The cache is rewound after each step.

    Returns ``(fastest, spread)``: ``{"step": ms, "projections": ms, ...}`` with the keys of
    ``DECODE_STAGES``, and for each key how far the median run lies above the fastest, as a
    fraction of the fastest (``clearly_apart`` compares two such timings).
    """
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache (see init_kv_cache), got {type(cache).__name__}")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if cache.length < 1 or cache.length >= cache.max_tokens:
        raise ValueError(f"the cache must hold at least one token and have room for one more, got "
                         f"length={cache.length} of max_tokens={cache.max_tokens}")
    t, d_k = cache.length, cache.K.shape[-1]
    decode_step(x_t, params, n_heads, cache, n_kv_heads=n_kv_heads)  # checks the arguments once
    cache.length = t
    group = n_heads // n_kv_heads
    K, V = cache.K[..., :t, :], cache.V[..., :t, :]  # (n_kv, t, d_k), (n_kv, t, d_v): what a step reads
    q = (x_t @ params["W_Q"]).reshape(n_kv_heads, group, d_k)  # (n_kv, h/n_kv, d_k)
    q = q * q.dtype.type(1 / np.sqrt(d_k))  # scaled in its own dtype, as decode_step does
    scores = q @ np.swapaxes(K, -1, -2)  # (n_kv, h/n_kv, d_k) @ (n_kv, d_k, t) -> (n_kv, h/n_kv, t)
    weights = softmax(scores)  # (n_kv, h/n_kv, t)
    concat = np.zeros(params["W_O"].shape[0], x_t.dtype)  # (h*d_v,)
    new_k, new_v = K[..., -1, :].copy(), V[..., -1, :].copy()  # (n_kv, d_k), (n_kv, d_v)

    def step():
        decode_step(x_t, params, n_heads, cache, n_kv_heads=n_kv_heads)
        cache.length = t  # rewound: every run is the step after t tokens

    def projections():
        for w in ("W_Q", "W_K", "W_V"):
            x_t @ params[w]  # (d_model,) @ (d_model, ...): reads the whole matrix
        concat @ params["W_O"]  # (h*d_v,) @ (h*d_v, d_model)

    def checks_and_write():
        check_layer(x_t[None, :], params, n_heads, n_kv_heads=n_kv_heads, tiled=True)  # the checks of one step
        cache.K[..., t, :] = new_k  # (n_kv, d_k) into the preallocated cache
        cache.V[..., t, :] = new_v  # (n_kv, d_v)

    calls = {"step": step, "projections": projections,
             "scores q·Kᵀ": lambda: q @ np.swapaxes(K, -1, -2),  # (n_kv, h/n_kv, t)
             "softmax": lambda: softmax(scores),  # (n_kv, h/n_kv, t)
             "weights·V": lambda: weights @ V,  # (n_kv, h/n_kv, t) @ (n_kv, t, d_v) -> (n_kv, h/n_kv, d_v)
             "checks + cache write": checks_and_write}
    evict = np.ones(EVICT_BYTES // 8)  # float64
    times = {name: [] for name in calls}
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(repeats):
            for name, call in calls.items():
                evict += 1.0  # reads and writes 64 MiB: the step's arrays leave the caches
                start = time.perf_counter()
                call()
                times[name].append((time.perf_counter() - start) * 1e3)
    fastest = {name: min(ms) for name, ms in times.items()}
    return fastest, {name: (float(np.median(ms)) - fastest[name]) / fastest[name] for name, ms in times.items()}


def show_decode_profile(profile: Mapping[str, Mapping[str, float]], read_mib: Mapping[str, float]) -> None:
    """One stacked bar per layout (MHA, GQA, MQA): the ms of each stage of ``DECODE_STAGES``."""
    names = list(profile)
    if set(names) != set(read_mib):
        raise ValueError(f"profile and read_mib must name the same layouts, got {names} and {list(read_mib)}")
    for name in names:
        missing = set(DECODE_STAGES) - set(profile[name])
        if missing:
            raise ValueError(f"profile[{name!r}] lacks the stages {sorted(missing)}")
    fig, ax = plt.subplots(figsize=(7.5, 3.6), constrained_layout=True)
    rows = [f"{name}\n{read_mib[name]:.1f} MiB read" for name in names]
    left = np.zeros(len(names))
    for stage, colour in zip(DECODE_STAGES, plt.cm.viridis(np.linspace(0.1, 0.9, len(DECODE_STAGES))), strict=True):
        ms = np.array([profile[name][stage] for name in names])
        ax.barh(rows, ms, left=left, color=colour, label=stage)
        left += ms
    ax.invert_yaxis()
    ax.set(xlabel="ms per decoding step (fastest of the runs)", title="Where a decoding step's time goes")
    ax.legend(loc="lower right", fontsize=10)
    parts = "; ".join(f"{name} ({read_mib[name]:.1f} MiB read): " + ", ".join(
        f"{stage} {profile[name][stage]:.2f} ms" for stage in DECODE_STAGES) for name in names)
    show_figure(fig, f"Stacked horizontal bars, one per layout, of the milliseconds each stage of one decoding "
                     f"step took in this run. {parts}.")


# -- notebook 07: pitfalls -------------------------------------------------------------------------

def show_scale_maps(right_w: np.ndarray, wrong_w: np.ndarray, *, max_right: float, max_wrong: float) -> None:
    """Head 0's (N, N) weights scaled by 1/sqrt(d_k) and by 1/sqrt(d_model), on one colour scale.

    ``right_w`` and ``wrong_w`` have shape (h, N, N); ``max_right`` and ``max_wrong`` are the mean
    largest weight of a row for each (for the alt text).
    """
    if right_w.shape != wrong_w.shape or right_w.ndim != 3:
        raise ValueError(f"expected two (h, N, N) weight arrays of one shape, got {right_w.shape} and {wrong_w.shape}")
    n = right_w.shape[-1]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.9), constrained_layout=True)
    top = float(max(right_w[0].max(), wrong_w[0].max()))  # one colour scale for both panels
    for ax, w, title in ((axes[0], right_w, "/ sqrt(d_k) (right)"), (axes[1], wrong_w, "/ sqrt(d_model) (wrong)")):
        im = ax.imshow(w[0], cmap="viridis", vmin=0, vmax=top)
        ax.set(title=f"head 0, {title}", xlabel="key position j", ylabel="query position i")
    fig.colorbar(im, ax=axes, label="attention weight")
    show_figure(fig, alt=(
        f"Two {n} by {n} attention maps of head 0 on one shared colour scale. Scaled by 1/sqrt(d_k) the rows "
        f"have bright spots (mean largest weight {max_right:.2f}); scaled by 1/sqrt(d_model) the map is an "
        f"almost even dark field (mean largest weight {max_wrong:.2f}, uniform would be {1 / n:.3f})."))


def show_feature_reach(moved: np.ndarray) -> None:
    """(d_model, h): how much each head's output moves when one input feature changes."""
    d_model, h = moved.shape
    fig, ax = plt.subplots(figsize=(5.5, 4.6), constrained_layout=True)
    im = ax.imshow(moved, cmap="viridis", aspect="auto", vmin=0)
    ax.set(title="Change in each head's output\nwhen one input feature changes",
           xlabel="head i", ylabel="changed input feature j (column of X)")
    fig.colorbar(im, ax=ax, label="max |change|")
    show_figure(fig, alt=(
        f"Heat map with the {d_model} input features down and the {h} heads across; the smallest change in any "
        f"cell is {moved.min():.3f}, the largest {moved.max():.3f}."))


def show_block_moves(blocks_without: np.ndarray, blocks_with: np.ndarray) -> None:
    """(h, h): how much output block j moves when head i is disturbed, without and with W_O."""
    if blocks_without.shape != blocks_with.shape:
        raise ValueError(f"expected two maps of one shape, got {blocks_without.shape} and {blocks_with.shape}")
    h = blocks_with.shape[0]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.9), constrained_layout=True)
    top = float(max(blocks_without.max(), blocks_with.max()))  # one colour scale: the panels are compared
    for ax, m, title in ((axes[0], blocks_without, "without W_O"), (axes[1], blocks_with, "with W_O")):
        im = ax.imshow(m, cmap="viridis", vmin=0, vmax=top)
        ax.set(title=title, xlabel="output column block", ylabel="disturbed head i")
    fig.colorbar(im, ax=axes, label="max |change|")
    off_diagonal = blocks_without[~np.eye(h, dtype=bool)]
    show_figure(fig, alt=(
        f"Two {h} by {h} maps of which output block moves when head i is disturbed, on one colour scale. "
        f"Without W_O the largest change off the diagonal is {off_diagonal.max():.2f}: head i moves block i "
        f"only. With W_O the smallest change of any cell is {blocks_with.min():.2f}: each head reaches every block."))


def show_split_comparison(right_split: np.ndarray, wrong_split: np.ndarray, misplaced: float) -> None:
    """(h, N, d_k) of source-token numbers: the right split and the reshape-only one, side by side."""
    if right_split.shape != wrong_split.shape or right_split.ndim != 3:
        raise ValueError(f"expected two (h, N, d_k) arrays of one shape, got {right_split.shape} and {wrong_split.shape}")
    h, n, d_k = right_split.shape
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.2), constrained_layout=True)
    for ax, s, title in ((axes[0], right_split, "split_heads (right)"), (axes[1], wrong_split, "reshape only (wrong)")):
        im = ax.imshow(s.reshape(-1, d_k), cmap="cividis", aspect="auto", vmin=0, vmax=n - 1)
        ax.set(title=title, xlabel="feature within the head (d_k)", ylabel="head, then row n")
        ax.set_yticks(np.arange(0, h * n, n), [f"head {i}" for i in range(h)])
    fig.colorbar(im, ax=axes, label="source token", ticks=range(n))
    show_figure(fig, alt=(
        f"Two stacks of {h} heads with {n} rows each, coloured by the token each number came from. Right: every "
        f"head shows the tokens 0 to {n - 1} top to bottom, the same gradient {h} times. Wrong: head 0 holds "
        f"tokens {wrong_split[0, :, 0].tolist()}; {misplaced:.0%} of the numbers are in another token's row."))


# -- notebook 08: why several heads ----------------------------------------------------------------

def show_accuracy_by_heads(heads: Sequence[int], table: np.ndarray, *, chance: float, d_model: int) -> None:
    """Pair accuracy per number of heads: a bar for the mean over seeds, a dot per seed.

    ``table`` has shape (len(heads), seeds); ``chance`` is the accuracy of a guess.
    """
    table = np.asarray(table)
    if table.ndim != 2 or table.shape[0] != len(heads):
        raise ValueError(f"table must have shape (len(heads)={len(heads)}, seeds), got {table.shape}")
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    pos = np.arange(len(heads))
    ax.bar(pos, table.mean(1), width=0.6, color=plt.cm.viridis(0.55), alpha=0.6, label="mean over seeds")
    jitter = np.linspace(-0.18, 0.18, table.shape[1])
    for i, accs in enumerate(table):
        ax.scatter(pos[i] + jitter, accs, s=26, color=plt.cm.viridis(0.1), zorder=3,
                   label="one seed" if i == 0 else None)
    ax.axhline(chance, color="0.4", ls=":", label="guessing")
    ax.set_xticks(pos, [f"h = {h}\nd_k = {d_model // h}" for h in heads])
    ax.set(ylim=(0, 1.05), xlabel=f"number of heads h (d_model = {d_model} for all)",
           ylabel="pair accuracy", title=f"Same width, parameters, budget: {table.shape[1]} seeds per h")
    ax.legend(loc="center right")
    one, several = table[0], table[1:]
    show_figure(fig, alt=(
        f"Bar chart of pair accuracy for h = {', '.join(map(str, heads))} with one dot per seed: h = {heads[0]} "
        f"reaches {one.mean():.2f} on average (seeds from {one.min():.2f} to {one.max():.2f}); every seed of "
        f"h = {', '.join(map(str, heads[1:]))} reaches at least {several.min():.2f} (rounded). Guessing is "
        f"{chance:.4f}."))


def show_attention_maps(labels: Sequence[str], weights: np.ndarray, *, seed: int, offsets: Sequence[int],
                        first_query: int) -> None:
    """Each head's attention map of one trained model, two maps a row: the query rows from
    ``first_query`` on (the positions where an answer is asked), every key.

    The alt text gives each head's mean weight at each of ``offsets`` places back, over the same
    queries.
    """
    weights = np.asarray(weights)
    n = len(labels)
    if weights.ndim != 3 or weights.shape[1:] != (n, n):
        raise ValueError(f"weights must have shape (h, {n}, {n}) for {n} labels, got {weights.shape}")
    if isinstance(first_query, bool) or not isinstance(first_query, (int, np.integer)) or not 0 <= first_query < n:
        raise ValueError(f"first_query must be an int in [0, {n}), got {first_query!r}")
    h = weights.shape[0]
    cols = min(h, 2)
    rows = (h + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(2.8 * cols + 1.4, 2.8 * rows + 0.6), squeeze=False,
                             constrained_layout=True)
    for i, ax in enumerate(axes.flat):
        im = ax.imshow(weights[i, first_query:], cmap="viridis", vmin=0, vmax=1)  # (N - first_query, N)
        ax.set_title(f"h = {h}: head {i}")
        ax.set_xticks(range(n), labels, rotation=90)
        ax.set_yticks(range(n - first_query), labels[first_query:])
        ax.set_xlabel("key j (pos:token)")
        if i % cols == 0:
            ax.set_ylabel("query i (pos:token)")
    fig.colorbar(im, ax=axes.ravel().tolist(), label="attention weight", shrink=0.9)
    peak = [[np.mean([weights[i, t, t - back] for t in range(first_query, n)]) for back in offsets] for i in range(h)]
    show_figure(fig, alt=(
        f"{h} attention map{'s' if h > 1 else ''} of the trained h = {h} model (seed {seed}) on one sequence of "
        f"{n} tokens, the queries that must answer ({first_query} to {n - 1}) down and every key across, on a "
        f"0 to 1 colour scale. Mean weight "
        f"{' and '.join(map(str, offsets))} places left of the diagonal: "
        + "; ".join(f"head {i}: " + " and ".join(f"{v:.2f}" for v in row) for i, row in enumerate(peak)) + "."))


def show_offset_profiles(profiles: Mapping[int, np.ndarray], *, offsets: Sequence[int], n_shown: int) -> None:
    """For each h, a heat map of every head's mean weight at 0 .. ``n_shown``-1 places back."""
    heads = list(profiles)
    fig, axes = plt.subplots(1, len(heads), figsize=(8.3, 3.6), gridspec_kw={"width_ratios": heads},
                             constrained_layout=True)
    for ax, h in zip(np.atleast_1d(axes), heads, strict=True):
        im = ax.imshow(profiles[h][:, :n_shown].T, cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.set(title=f"h = {h}", xlabel="head", xticks=range(0, h, 1 if h < 8 else 2), yticks=range(n_shown))
    np.atleast_1d(axes)[0].set_ylabel("places back (key = t - places)")
    fig.colorbar(im, ax=np.atleast_1d(axes).tolist(), label="mean weight")
    fig.suptitle("Which head looks how far back (trained, seed 0)")
    single = profiles[heads[0]][0]
    a, b = offsets
    split = {h: [i for i, row in enumerate(profiles[h]) if min(row[a], row[b]) > 0.15] for h in heads[1:]}
    shares = "; ".join(
        f"h = {h}: every head bright at only one of the two" if not split[h]
        else f"h = {h}: " + ", ".join(f"head {i} splits {profiles[h][i][a]:.2f} and {profiles[h][i][b]:.2f}"
                                      for i in split[h]) + ", the others bright at only one"
        for h in heads[1:])
    show_figure(fig, alt=(
        f"{len(heads)} small heat maps, for h = {', '.join(map(str, heads))}, with 0 to {n_shown - 1} places back "
        f"down and the heads across. The single head splits its weight between {a} place{'s' if a > 1 else ''} "
        f"back ({single[a]:.2f}) and {b} places back ({single[b]:.2f}). {shares}."))


def show_head_ablation(accuracy_without: Sequence[float], looks_back: Sequence[int], *, highlight: int,
                       seed: int = 0) -> None:
    """The model's accuracy with each head removed in turn; each bar labelled with how far back that
    head mostly looks (bars for ``highlight`` places back in a darker colour)."""
    _check_same_length(accuracy_without=accuracy_without, looks_back=looks_back)
    h = len(accuracy_without)
    fig, ax = plt.subplots(figsize=(7, 3.8), constrained_layout=True)
    ax.bar(range(h), accuracy_without, color=[plt.cm.viridis(0.2 if back == highlight else 0.75) for back in looks_back])
    for i, back in enumerate(looks_back):
        ax.text(i, accuracy_without[i] + 0.02, f"t-{back}", ha="center")
    ax.set(ylim=(0, 1.12), xticks=range(h), xlabel="head removed (label: how far back it mostly looks)",
           ylabel="pair accuracy", title=f"h = {h} (seed {seed}): accuracy without each head")
    show_figure(fig, alt=(
        f"Bar chart of the h = {h} model's pair accuracy with one head removed, for heads 0 to {h - 1}: "
        + ", ".join(f"head {i} (attends t-{back}) {v:.2f}"
                    for i, (back, v) in enumerate(zip(looks_back, accuracy_without, strict=True))) + "."))


def show_prune_curves(curves: Mapping[tuple[int, int], np.ndarray], prunable: Mapping[int, Sequence[int]]) -> None:
    """Accuracy against the fraction of heads pruned, one line per (h, seed) of ``curves``.

    ``curves[h, seed]`` has shape (h + 1,); ``prunable[h]`` lists, per seed, the heads that could
    go at little cost (for the alt text).
    """
    heads = sorted({h for h, _ in curves})
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    for h, shade in zip(heads, np.linspace(0.15, 0.8, len(heads)), strict=True):
        for j, curve in enumerate(c for (hh, _), c in curves.items() if hh == h):
            ax.plot(np.arange(h + 1) / h, curve, "o-", ms=3, color=plt.cm.viridis(shade), alpha=0.7,
                    label=f"h = {h}" if j == 0 else None)
    seeds = len(curves) // len(heads)
    ax.set(xlabel="fraction of heads pruned (least important first)", ylabel="pair accuracy",
           title=f"Pruning trained heads ({seeds} seeds per h)")
    ax.legend()
    start = min(float(c[0]) for c in curves.values())
    def after_one(h):  # (lowest, highest) accuracy over the seeds once one head is pruned
        ones = [float(c[1]) for (hh, _), c in curves.items() if hh == h]
        return min(ones), max(ones)

    fates = "; ".join(
        f"h = {h}: the first head removed costs more than the tolerance (accuracy {after_one(h)[0]:.2f} to "
        f"{after_one(h)[1]:.2f} after it)" if max(prunable[h]) == 0
        else f"h = {h}: {min(prunable[h])} to {max(prunable[h])} heads go at little cost, then it falls"
        for h in heads)
    show_figure(fig, alt=(
        f"Pair accuracy against the fraction of heads pruned, one line per seed for h = "
        f"{', '.join(map(str, heads))}, every line starting at {start:.1f} (rounded). {fates}."))
