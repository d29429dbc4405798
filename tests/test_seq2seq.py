"""The digit-reversal encoder-decoder (mha_core.training.seq2seq): the task and its padding, the
hand-written gradients against finite differences, the encoder-side cache against the
teacher-forced pass, training that lowers the loss, and the shipped weights' held-out accuracy
and alignment, recomputed here."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import MAX_REL_ERR, numeric_grad, relative_error

from mha_core.training import seq2seq as s2s
from mha_core.training.tasks import IGNORE

STATED_ACCURACY = 0.99  # exact-match accuracy on held-out sequences, stated in the module's record
STATED_ALIGNMENT = 0.9  # mean cross-attention weight on the aligned source position, every head


def test_the_task_reverses_left_padded_digits():
    task = s2s.ReverseTask(max_len=5)
    b = task.sample(np.random.default_rng(0), 50)
    P = task.n
    for src, n, tin, tout, L in zip(b["src"], b["n_src"], b["tgt_in"], b["tgt_out"], b["lengths"], strict=True):
        assert n == L + 1 and 1 <= L <= 5
        assert (src[: P - n] == s2s.PAD).all() and src[P - n] == s2s.BOS
        digits = src[P - L:]
        assert (digits < 10).all()
        assert tout[: L + 1].tolist() == [*digits[::-1], s2s.EOS] and (tout[L + 1:] == IGNORE).all()
        assert tin[: L + 1].tolist() == [s2s.BOS, *digits[::-1]]
    mask = s2s.source_mask(b["n_src"], P)  # (B, 1, 1, P)
    assert mask.shape == (50, 1, 1, P)
    np.testing.assert_array_equal(mask[:, 0, 0], b["src"] != s2s.PAD)


def test_held_out_sequences_are_never_trained_on():
    task = s2s.ReverseTask()
    key = lambda b: {tuple(s) for s in b["src"].tolist()}  # noqa: E731
    train = key(task.sample(np.random.default_rng(1), 3000))
    held = key(task.sample(np.random.default_rng(2), 3000, "held_out"))
    assert train and held and not train & held
    rng = np.random.default_rng(3)
    share = s2s._held_out(rng.integers(0, 10, (20_000, 8)), rng.integers(1, 9, 20_000)).mean()
    assert 0.17 < share < 0.23  # a fifth of all sequences


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="min_len must be at most max_len=3"):
        s2s.ReverseTask(max_len=3, min_len=4)
    with pytest.raises(ValueError, match="split must be 'train' or 'held_out'"):
        s2s.ReverseTask().sample(0, 4, "test")
    with pytest.raises(ValueError, match="n_heads=3 does not divide d_model=32"):
        s2s.Seq2SeqConfig(n_heads=3)
    params, record = s2s.load_reverse()
    b = s2s.ReverseTask().sample(0, 4)
    with pytest.raises(TypeError, match="src must be an int ndarray of shape"):
        s2s.forward(params, b["src"].astype(float), b["n_src"], b["tgt_in"], 2)
    with pytest.raises(ValueError, match=r"n_src must be 4 ints in \[1, 9\]"):
        s2s.forward(params, b["src"], b["n_src"] * 0, b["tgt_in"], 2)
    with pytest.raises(ValueError, match="params is missing"):
        s2s.greedy_decode({"src_emb": params["src_emb"]}, b["src"], b["n_src"], 2)
    cache = s2s.encoder_cache(params, b["src"], b["n_src"], 2)
    with pytest.raises(ValueError, match=r"x_t must be a float ndarray of shape \(B, d_model\) = \(4, 32\)"):
        s2s.cross_attend(np.zeros((3, 32)), cache, params, 2)
    with pytest.raises(TypeError, match="cache must be a CrossCache"):
        s2s.cross_attend(np.zeros((4, 32)), (cache.K, cache.V), params, 2)
    with pytest.raises(TypeError, match="task must be a ReverseTask"):
        s2s.train("reverse", s2s.Seq2SeqConfig())


def test_the_hand_written_gradients_match_finite_differences():
    task, cfg = s2s.ReverseTask(max_len=3), s2s.Seq2SeqConfig(d_model=8, n_heads=2)
    params = s2s.init_seq2seq(task, cfg, np.random.default_rng(0))
    batch = task.sample(np.random.default_rng(1), 3)
    _, grads = s2s.loss_and_grads(params, batch, cfg.n_heads)
    assert set(grads) == set(params)

    def loss():
        return s2s.loss_and_grads(params, batch, cfg.n_heads)[0]

    for name in params:
        err = relative_error(grads[name], numeric_grad(loss, params[name]))
        assert err < MAX_REL_ERR, f"{name}: {err:.2e}"


def test_a_few_steps_of_training_lower_the_loss():
    cfg = s2s.Seq2SeqConfig(steps=40, batch=32)
    _, losses, _ = s2s.train(s2s.ReverseTask(), cfg)
    assert losses[-5:].mean() < 0.8 * losses[:5].mean()


def test_decoding_with_the_encoder_side_cache_equals_the_teacher_forced_pass():
    """Each greedy step reuses K, V computed once per source; fed its own tokens, the full pass
    gives the same choices and the same cross-attention maps."""
    params, record = s2s.load_reverse()
    h = record["model"]["n_heads"]
    b = s2s.ReverseTask().sample(np.random.default_rng(5), 16, "held_out")
    tokens, maps = s2s.greedy_decode(params, b["src"], b["n_src"], h)  # (B, T), (B, h, T, P)
    tgt_in = np.concatenate([np.full((16, 1), s2s.BOS), tokens[:, :-1]], 1)
    logits, saved = s2s.forward(params, b["src"], b["n_src"], tgt_in, h)
    np.testing.assert_array_equal(logits.argmax(-1), tokens)
    np.testing.assert_allclose(maps, saved["cross"]["weights"], atol=1e-12)
    cache = s2s.encoder_cache(params, b["src"], b["n_src"], h)
    assert cache.K.shape == (16, h, 9, 32 // h) and cache.mask.shape == (16, 1, 1, 9)
    assert (maps[~np.broadcast_to(cache.mask, maps.shape)] == 0).all()  # no weight on a pad


def test_the_shipped_model_reverses_held_out_sequences_and_attends_to_the_aligned_digit():
    params, record = s2s.load_reverse()
    task, cfg = s2s.task_and_config(record)
    held = record["held_out"]
    batch = task.sample(np.random.default_rng(held["seed"]), held["sequences"], "held_out")
    ev = s2s.evaluate(params, batch, cfg.n_heads)
    print(f"\nheld-out exact-match accuracy {ev['accuracy']:.4f}; mean weight on the aligned source "
          f"position {ev['aligned_weight_mean']:.3f} (per head {ev['aligned_weight']})")
    assert ev["accuracy"] >= STATED_ACCURACY
    assert min(ev["aligned_weight"]) >= STATED_ALIGNMENT
    assert ev["accuracy"] == pytest.approx(held["accuracy"])  # the record says what these weights do
    assert ev["aligned_weight"] == pytest.approx(held["aligned_weight"])
    # the aligned position is also each head's favourite: the map's maximum is on the anti-diagonal
    _, w = s2s.greedy_decode(params, batch["src"], batch["n_src"], cfg.n_heads)  # (B, h, T, P)
    keep = batch["tgt_out"] != IGNORE  # (B, T)
    t = np.arange(w.shape[2])
    argmax = w.argmax(-1)  # (B, h, T)
    on_diagonal = float((argmax == (w.shape[-1] - 1 - t))[np.broadcast_to(keep[:, None], argmax.shape)].mean())
    print(f"each head's largest weight is on the aligned position for {on_diagonal:.3f} of the answer tokens")
    assert on_diagonal > 0.95


@pytest.mark.slow
def test_retraining_with_the_recorded_config_reaches_the_stated_figures():
    """``make weights`` is reproducible: the record's task and config, trained afresh, reach the
    stated accuracy and alignment on the record's held-out sequences."""
    _, record = s2s.load_reverse()
    task, cfg = s2s.task_and_config(record)
    params, losses, _ = s2s.train(task, cfg)
    held = record["held_out"]
    ev = s2s.evaluate(params, task.sample(np.random.default_rng(held["seed"]), held["sequences"], "held_out"),
                      cfg.n_heads)
    assert ev["accuracy"] >= STATED_ACCURACY and min(ev["aligned_weight"]) >= STATED_ALIGNMENT
    assert losses[-20:].mean() == pytest.approx(record["final_loss"], rel=0.5)
