"""mha_core.ui.lesson_figures: each lesson figure shows with alt text from its numbers, text >= 10 pt."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from mha_core.ui import lesson_figures as F
from mha_core.ui.viz import MIN_FONT_PT, FigureImage


@pytest.fixture
def shown(monkeypatch):
    """The FigureImage each call displays, instead of a notebook output."""
    images = []

    def keep(fig, alt):
        images.append(FigureImage(fig, alt))
        plt.close(fig)

    monkeypatch.setattr(F, "show_figure", keep)
    return images


def _heads():
    heads = [1, 2, 4, 8]
    params = {h: 4 * 64**2 for h in heads}
    macs = {h: {"total": 1000, "softmax_exps": h * 100} for h in heads}
    timing = {h: {"forward": 1.0 + h, "matmuls": 0.5, "softmax": 0.1 * h} for h in heads}
    spread = {h: dict.fromkeys(("forward", "matmuls", "softmax"), 0.1) for h in heads}
    return heads, params, macs, timing, spread


CALLS = {
    "weights_bar": (lambda: F.show_weights_bar(["a", "b", "c"], np.array([0.5, 0.3, 0.2])), "'a' at 0.50"),
    "scaling": (lambda: F.show_scaling([4, 16], [4.0, 16.0], [1.0, 1.0], [0.5, 0.8], [0.3, 0.3]), "to 0.80"),
    "positional_encoding": (lambda: F.show_positional_encoding(np.zeros((10, 8))), "10 positions"),
    "causal_mask": (lambda: F.show_causal_mask(np.tri(3, dtype=bool), ["x", "y", "z"]), "3 by 3"),
    "residual_stream": (F.show_residual_stream, "residual stream"),
    "flat_in_h": (lambda: F.show_flat_in_h(*_heads()[:3], 100, 64), "at h=8"),
    "macs_against_n": (lambda: F.show_macs_against_n(np.array([16, 128, 1024]), np.array([1, 8, 64]),
                                                     np.array([1, 64, 4096]), 128, 64), "N = 2·d_model = 128"),
    "clock": (lambda: F.show_clock(_heads()[0], _heads()[3], _heads()[4], 10**6, 128, 64), "from 2.0 to 9.0 ms"),
    "score_growth": (lambda: F.show_score_growth(np.array([512, 1024, 2048, 4096]), 8, 512, 4), "slope 2"),
    "peak_memory": (lambda: F.show_peak_memory([256, 512], {"one-shot": [2.6, 9.1], "tiled": [1.7, 1.9]}, 8, 32),
                    "tiled from 1.7 to 1.9 MiB"),
    "worked_example": (lambda: F.show_worked_example_macs(
        np.array([10, 100, 4096]), 4 * np.array([10, 100, 4096]) * 512**2, 2 * np.array([10, 100, 4096])**2 * 512,
        d_model=512, h=8, n_star=1024, marks=(100, 2000)), "10.2 times the attention core"),
    "kv_cache_sizes": (lambda: F.show_kv_cache_sizes([4, 2, 1], [2.0, 1.0, 0.5], n_tokens=1024, d_model=64,
                                                     n_heads=4, layers=2), "2 GiB, 1 GiB, 0.5 GiB"),
    "decode_profile": (lambda: F.show_decode_profile(
        {"MHA": dict.fromkeys(F.DECODE_STAGES, 1.0), "MQA": dict.fromkeys(F.DECODE_STAGES, 0.5)},
        {"MHA": 48.0, "MQA": 10.5}), "MQA (10.5 MiB read): projections 0.50 ms, scores q·Kᵀ 0.50 ms, softmax 0.50 ms, weights·V 0.50 ms, checks + cache write 0.50 ms"),
}


@pytest.mark.parametrize("name", CALLS)
def test_each_figure_has_its_numbers_in_the_alt_text_and_readable_text(shown, name):
    call, phrase = CALLS[name]
    call()
    (image,) = shown
    assert phrase in image.alt
    assert image.min_font_pt >= MIN_FONT_PT - 1e-9


def test_arrays_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="one length"):
        F.show_weights_bar(["a", "b"], np.array([1.0]))
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 2\)"):
        F.show_causal_mask(np.ones((3, 3), bool), ["a", "b"])


def _decode_layer(n_kv: int, t: int = 40):
    from mha_core import MHAConfig, init_kv_cache, init_params, prefill

    p = init_params(MHAConfig(32, 4, n_kv_heads=n_kv), rng=0)
    x = np.random.default_rng(1).standard_normal((t, 32)).astype(np.float32)  # (t, d_model)
    cache = init_kv_cache(p, 4, t + 1, n_kv_heads=n_kv)
    return x, p, prefill(x, p, 4, cache, n_kv_heads=n_kv)


@pytest.mark.parametrize("n_kv", [4, 2, 1])
def test_profile_decode_step_times_every_stage_and_leaves_the_cache_as_it_was(n_kv):
    x, p, cache = _decode_layer(n_kv)
    before = cache.K.copy()
    times, spread = F.profile_decode_step(x[-1], p, 4, cache, n_kv_heads=n_kv, repeats=3)
    assert list(times) == list(spread) == ["step", *F.DECODE_STAGES]
    assert all(ms > 0 for ms in times.values()) and all(s >= 0 for s in spread.values())
    assert cache.length == 40
    np.testing.assert_array_equal(cache.K[..., :40, :], before[..., :40, :])


def test_profile_decode_step_refuses_bad_arguments():
    x, p, cache = _decode_layer(2)
    with pytest.raises(ValueError, match="repeats must be a positive int, got 0"):
        F.profile_decode_step(x[-1], p, 4, cache, n_kv_heads=2, repeats=0)
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        F.profile_decode_step(x[-1], p, 4, {"K": 0}, n_kv_heads=2)
    cache.length = cache.max_tokens
    with pytest.raises(ValueError, match="room for one more"):
        F.profile_decode_step(x[-1], p, 4, cache, n_kv_heads=2)
    with pytest.raises(ValueError, match="same layouts"):
        F.show_decode_profile({"MHA": dict.fromkeys(F.DECODE_STAGES, 1.0)}, {"MQA": 1.0})
    with pytest.raises(ValueError, match="lacks the stages"):
        F.show_decode_profile({"MHA": {"step": 1.0}}, {"MHA": 1.0})


def test_notebook_08_figures(shown):
    F.show_accuracy_by_heads([1, 2], np.array([[0.2, 0.3], [1.0, 1.0]]), chance=1 / 256, d_model=16)
    F.show_attention_maps(["0:a", "1:b", "2:c", "3:d"], np.tile(np.eye(4), (2, 1, 1)), seed=0, offsets=(1, 3),
                          first_query=3)
    F.show_offset_profiles({1: np.array([[0.0, 0.5, 0.0, 0.5, 0.0, 0.0]]), 2: np.eye(2, 6, 1)}, offsets=(1, 3),
                           n_shown=6)
    F.show_head_ablation([0.75, 1.0], [3, 1], highlight=1)
    F.show_prune_curves({(2, 0): np.array([1.0, 0.06, 0.0]), (4, 0): np.array([1.0, 1.0, 0.5, 0.1, 0.0])},
                        {2: [0], 4: [1]})
    alts = [image.alt for image in shown]
    assert "h = 1 reaches 0.25 on average" in alts[0]
    assert "head 0: 0.00 and 0.00; head 1: 0.00 and 0.00" in alts[1]
    assert "between 1 place back (0.50) and 3 places back (0.50). h = 2: every head bright at only one" in alts[2]
    assert "head 0 (attends t-3) 0.75" in alts[3]
    assert "the queries that must answer (3 to 3) down" in alts[1]
    assert ("h = 2: the first head removed costs more than the tolerance (accuracy 0.06 to 0.06 after it); "
            "h = 4: 1 to 1 heads go at little cost" in alts[4])
    assert all(image.min_font_pt >= MIN_FONT_PT - 1e-9 for image in shown)


def test_notebook_08_figures_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match=r"table must have shape \(len\(heads\)=3, seeds\)"):
        F.show_accuracy_by_heads([1, 2, 4], np.zeros((2, 5)), chance=0.1, d_model=16)
    with pytest.raises(ValueError, match=r"weights must have shape \(h, 2, 2\)"):
        F.show_attention_maps(["a", "b"], np.zeros((1, 3, 3)), seed=0, offsets=(1,), first_query=1)
    with pytest.raises(ValueError, match=r"first_query must be an int in \[0, 2\), got 2"):
        F.show_attention_maps(["a", "b"], np.zeros((1, 2, 2)), seed=0, offsets=(1,), first_query=2)
    with pytest.raises(ValueError, match="one length"):
        F.show_head_ablation([1.0, 0.5], [1], highlight=1)


def test_notebook_01_and_07_figures(shown):
    moved = np.zeros((4, 8), bool)
    moved[:, 2:4] = True
    F.show_where_output_moves(moved, np.ones((4, 8), bool), changed_head=1)
    w = np.full((2, 4, 4), 0.25)
    F.show_scale_maps(w, w, max_right=0.6, max_wrong=0.26)
    F.show_feature_reach(np.full((8, 2), 0.5))
    F.show_block_moves(np.eye(2), np.ones((2, 2)))
    split = np.arange(3)[None, :, None] * np.ones((2, 3, 2), int)
    F.show_split_comparison(split, split[:, ::-1], 0.5)
    alts = [image.alt for image in shown]
    assert "only columns 2 to 3, head 1's block, changed; with the real W_O 8 of the 8 columns" in alts[0]
    assert "mean largest weight 0.60" in alts[1] and "uniform would be 0.250" in alts[1]
    assert "smallest change in any cell is 0.500" in alts[2]
    assert "largest change off the diagonal is 0.00" in alts[3]
    assert "head 0 holds tokens [2, 1, 0]; 50% of the numbers" in alts[4]
    assert all(image.min_font_pt >= MIN_FONT_PT - 1e-9 for image in shown)
    with pytest.raises(ValueError, match="two \\(N, d_model\\) masks"):
        F.show_where_output_moves(np.zeros((2, 3), bool), np.zeros((3, 3), bool), changed_head=0)


def test_time_attention_parts_times_each_part_for_each_h():
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)  # (N, d_model)
    timing, spread = F.time_attention_parts(x, [1, 4], rounds=3)
    assert set(timing) == set(spread) == {1, 4}
    assert all(set(t) == {"forward", "matmuls", "softmax"} and min(t.values()) > 0 for t in timing.values())
    assert all(min(s.values()) >= 0 for s in spread.values())
    with pytest.raises(ValueError, match="rounds must be a positive int, got 0"):
        F.fastest_ms({"a": lambda: None}, rounds=0)


def test_fastest_ms_keeps_the_fastest_round_and_the_medians_distance_above_it():
    (best, spread), = F.fastest_ms({"a": lambda: sum(range(2000))}, rounds=5).values()
    assert best > 0 and spread >= 0


@pytest.mark.parametrize(("a", "b", "apart"), [
    ((1.0, 0.1), (1.5, 0.1), True),  # gap 0.5 ms > 0.1 + 0.15 ms
    ((1.0, 0.3), (1.5, 0.2), False),  # gap 0.5 ms < 0.3 + 0.3 ms
    ((2.0, 0.0), (2.0, 0.0), False),
])
def test_clearly_apart_needs_a_gap_larger_than_both_spreads(a, b, apart):
    assert F.clearly_apart(a, b) is apart and F.clearly_apart(b, a) is apart


def _tick_labels(axis):
    axis.axes.figure.canvas.draw()
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]


def test_the_cost_figures_label_every_h_and_every_d_k(monkeypatch):
    """The h and d_k axes of notebook 05 show every value (plain_log_ticks once blanked them)."""
    figures = []
    monkeypatch.setattr(F, "show_figure", lambda fig, alt: figures.append(fig))
    heads, params, macs, timing, spread = _heads()
    F.show_flat_in_h(heads, params, macs, 100, 64)
    F.show_clock(heads, timing, spread, 10**6, 128, 64)
    flat, clock = figures
    wanted_h = [str(h) for h in heads]
    assert [_tick_labels(ax.xaxis) for ax in flat.axes] == [wanted_h, wanted_h]
    assert _tick_labels(clock.axes[0].xaxis) == wanted_h
    assert _tick_labels(clock.axes[1].xaxis) == [str(64 // h) for h in heads]
    # the clock's timings carry error bars: one vertical segment per point of each line
    from matplotlib.collections import LineCollection
    bars = [c for c in clock.axes[0].collections if isinstance(c, LineCollection)]
    assert len(bars) == 3 and all(len(c.get_segments()) == len(heads) for c in bars)
    for fig in figures:
        plt.close(fig)
