"""The tiny trainer: gradients against finite differences, determinism, learning, ablation, progress."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import MAX_REL_ERR, numeric_grad, relative_error

from mha_core import MHAConfig, count_params
from mha_core.training.tasks import IGNORE, OffsetPairTask
from mha_core.training.trainer import (
    ModelConfig,
    TrainConfig,
    accuracy,
    attention_by_offset,
    converged_step,
    count_model_params,
    cross_entropy,
    forward,
    head_ablation,
    init_model,
    loss_and_grads,
    prune_curve,
    slot_accuracy,
    text_progress,
    train,
    widget_progress,
)

SMALL = OffsetPairTask(vocab=3, n=5, offsets=(1, 2))


@pytest.mark.parametrize("h", [1, 2, 4])
def test_parameter_count_is_flat_in_h_and_matches_the_arrays(h):
    model = ModelConfig(h, d_model=8)
    params = init_model(SMALL, model, 0)
    counts = count_model_params(SMALL, model)
    assert counts["total"] == sum(a.size for a in params.values())
    assert counts["attention"] == count_params(MHAConfig(8, h))["total"]
    assert counts == count_model_params(SMALL, ModelConfig(1, d_model=8))


@pytest.mark.parametrize("h", [1, 2])
def test_loss_gradients_match_finite_differences(h):
    params = init_model(SMALL, ModelConfig(h, d_model=4), 3)
    x, y = SMALL.sample(4, 3)
    _, grads = loss_and_grads(params, x, y, h)
    assert set(grads) == set(params)
    for name, arr in params.items():
        num = numeric_grad(lambda: loss_and_grads(params, x, y, h)[0], arr)  # noqa: B023 (called at once)
        assert relative_error(grads[name], num) < MAX_REL_ERR, name


def test_cross_entropy_against_a_direct_formula_and_ignore():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 3, 4))
    y = np.array([[1, IGNORE, 3], [0, 2, IGNORE]])
    loss, dlogits = cross_entropy(logits, y)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    kept = [(0, 0), (0, 2), (1, 0), (1, 1)]
    assert loss == pytest.approx(-np.mean([np.log(p[i, j, y[i, j]]) for i, j in kept]))
    assert np.all(dlogits[0, 1] == 0) and np.all(dlogits[1, 2] == 0)
    expected = p[0, 0] - np.eye(4)[1]
    np.testing.assert_allclose(dlogits[0, 0], expected / len(kept))
    with pytest.raises(ValueError, match="no entry with a target"):
        cross_entropy(logits, np.full((2, 3), IGNORE))


def test_forward_shapes_and_attention_is_causal():
    task = OffsetPairTask(5, 6, (1, 3))
    params = init_model(task, ModelConfig(2, d_model=8), 0)
    x, _ = task.sample(0, 4)
    logits, cache = forward(params, x, 2)
    assert logits.shape == (4, 6, 2, 5)
    w = cache["mha"]["weights"]
    assert w.shape == (4, 2, 6, 6)
    assert np.all(np.triu(w, k=1) == 0)
    np.testing.assert_allclose(w.sum(-1), 1.0)


def test_train_is_deterministic_per_seed_and_learns():
    task = OffsetPairTask(4, 6, (1, 2))
    model = ModelConfig(2, d_model=8)
    a = train(task, model, TrainConfig(steps=120, batch=32, lr=1e-2, seed=5))
    b = train(task, model, TrainConfig(steps=120, batch=32, lr=1e-2, seed=5))
    c = train(task, model, TrainConfig(steps=120, batch=32, lr=1e-2, seed=6))
    np.testing.assert_array_equal(a.losses, b.losses)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    assert not np.array_equal(a.losses, c.losses)
    assert a.losses[-10:].mean() < 0.5 * a.losses[:10].mean()
    x, y = task.sample(99, 200)
    assert accuracy(a.params, x, y, 2) > 1 / task.vocab**2  # better than guessing the pair


def test_attention_by_offset_against_a_loop():
    task = OffsetPairTask(4, 6, (1, 3))
    params = init_model(task, ModelConfig(2, d_model=8), 2)
    x, _ = task.sample(1, 5)
    prof = attention_by_offset(params, x, 2, min_query=2)
    w = forward(params, x, 2)[1]["mha"]["weights"]  # (B, h, N, N)
    for i in range(2):
        for k in range(6):
            vals = [w[b, i, t, t - k] for b in range(5) for t in range(max(k, 2), 6)]
            assert prof[i, k] == pytest.approx(np.mean(vals))
    full = attention_by_offset(params, x, 2)
    np.testing.assert_allclose(np.nansum(full * np.arange(6, 0, -1), -1), 6.0)  # every query's row sums to 1
    with pytest.raises(ValueError, match="min_query must be an int"):
        attention_by_offset(params, x, 2, min_query=6)


def test_ablation_and_pruning_use_the_head_mask():
    task = OffsetPairTask(4, 6, (1, 2))
    params = train(task, ModelConfig(4, d_model=8), TrainConfig(steps=60, batch=16, seed=1)).params
    x, y = task.sample(3, 100)
    full = accuracy(params, x, y, 4)
    abl = head_ablation(params, x, y, 4)
    assert abl.shape == (4,)
    for i in range(4):
        assert abl[i] == accuracy(params, x, y, 4, head_mask=np.arange(4) != i)
    order, curve = prune_curve(params, x, y, 4)
    assert sorted(order.tolist()) == [0, 1, 2, 3]
    assert curve.shape == (5,) and curve[0] == full
    assert curve[1] == abl[order[0]]  # the first pruned head is the one whose removal costs least
    assert abl[order[0]] == abl.max()
    assert curve[-1] == accuracy(params, x, y, 4, head_mask=np.zeros(4))
    a, b = slot_accuracy(params, x, y, 4)
    assert 0 <= full <= min(a, b) <= 1


def test_progress_callbacks():
    task = OffsetPairTask(3, 4, (1, 2))
    calls = []
    train(task, ModelConfig(1, d_model=4), TrainConfig(steps=7, batch=2), progress=lambda *a: calls.append(a))
    assert [c[0] for c in calls] == list(range(1, 8)) and all(c[1] == 7 for c in calls)
    lines = []
    report = text_progress(every=3, print_fn=lines.append)
    for step in range(1, 8):
        report(step, 7, 0.5)
    assert lines == [f"step     {s}/7  loss 0.500" for s in (3, 6, 7)]
    box, report = widget_progress()
    report(50, 100, 1.25)
    bar, label = box.children
    assert (bar.value, bar.max) == (50, 100) and "loss 1.250" in label.value


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: ModelConfig(3, d_model=8), ValueError, "does not divide d_model"),
        (lambda: TrainConfig(steps=0), ValueError, "steps must be a positive int"),
        (lambda: TrainConfig(lr=2.0), ValueError, r"lr must be a float in \(0, 1\)"),
        (lambda: TrainConfig(seed=-1), ValueError, "seed must be a non-negative int"),
        (lambda: train("task", ModelConfig(1)), TypeError, "task must be an OffsetPairTask"),
        (lambda: train(SMALL, ModelConfig(1, 4), progress=3), TypeError, "progress must be callable"),
        (lambda: forward(init_model(SMALL, ModelConfig(1, 4), 0), np.zeros((1, 5)), 1), TypeError, "int ndarray"),
        (lambda: forward(init_model(SMALL, ModelConfig(1, 4), 0), np.zeros((1, 9), int), 1), ValueError, "N=9"),
        (lambda: text_progress(every=0), ValueError, "every must be a positive int"),
        (lambda: forward({"tok_emb": np.zeros((3, 4))}, np.zeros((1, 5), int), 1), ValueError, "params is missing"),
        (lambda: accuracy(init_model(SMALL, ModelConfig(1, 4), 0), *SMALL.sample(0, 2)[:1], np.zeros((2, 4), int), 1),
         ValueError, "y must have the shape of x"),
        (lambda: init_model(SMALL, ModelConfig(1, 4), "seed"), TypeError, "rng must be None, an int seed"),
    ],
)
def test_trainer_validates_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_converged_step():
    losses = np.array([1.0] * 30 + [0.0] * 30)
    assert converged_step(losses, threshold=0.01, window=10) == 40  # the first window of ten zeros
    assert converged_step(losses, threshold=0.5, window=10) == 36  # mean 0.4 after six zeros
    assert converged_step(np.ones(50)) is None
    assert converged_step(np.zeros(5), window=10) is None
    with pytest.raises(ValueError, match="losses must be 1-D"):
        converged_step(np.zeros((2, 3)))


def test_accuracy_and_slot_accuracy_by_hand():
    # A model whose answers are known without running it: W_V = 0 silences attention, so the
    # residual stream is the one-hot token (tok_emb = I, pos_emb = 0); slot 0 reads it back
    # (it always answers "the current token"), slot 1 always answers token 2 (through b_out).
    V, N = 4, 4
    task = OffsetPairTask(V, N, (1, 2))
    params = init_model(task, ModelConfig(1, d_model=V), 0)
    params.update(tok_emb=np.eye(V), pos_emb=np.zeros((N, V)), W_V=np.zeros((V, V)),
                  W_out=np.hstack([np.eye(V), np.zeros((V, V))]), b_out=np.r_[np.zeros(V), np.eye(V)[2]])
    x = np.array([[0, 1, 2, 3], [3, 3, 0, 1]])
    pair = lambda a, b: V * a + b  # noqa: E731
    y = np.array([
        [IGNORE, pair(1, 2), pair(2, 1), pair(0, 2)],  # right; slot 1 wrong; slot 0 wrong (x=3)
        [IGNORE, IGNORE, pair(0, 2), pair(1, 2)],  # right; right
    ])
    assert accuracy(params, x, y, 1) == pytest.approx(3 / 5)
    assert slot_accuracy(params, x, y, 1) == pytest.approx((4 / 5, 4 / 5))
    assert accuracy(params, x, y, 1, head_mask=np.zeros(1)) == pytest.approx(3 / 5)  # nothing to remove
