"""The shipped weights: they reach their recorded accuracy, retraining reproduces them, and the
interface the dashboard uses (``AVAILABLE_HEADS``, ``attention_maps``) keeps its promise."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from mha_core.training import toy_models
from mha_core.training.trainer import (
    ModelConfig,
    accuracy,
    converged_step,
    count_model_params,
    slot_accuracy,
    train,
)

RECORD = toy_models.load_record()
# Retraining on another machine may round differently in the last bits; over 600 steps that can
# move a few eval positions. 1% of 9,000 positions is far more than that and far less than the
# gap between one head and two.
ACC_TOL = 0.01
# Another BLAS or a later edit of the core's rounding can flip an exact tie in an arg-max; allow
# two of the 9,000 held-out answers to differ from the record.
ANSWERS_TOL = 2 / (toy_models.EVAL_BATCH * toy_models.TASK.n_targets)
# The single head's 3,000-step runs are sensitive to last-bit rounding, unlike the 600-step runs
# (which reproduce exactly): another machine's BLAS gives a different pair accuracy for seed 0
# and a control that converges a few hundred steps earlier or later. So the long runs are compared with the record at the level of the claim: the stuck head within
# STUCK_TOL of the recorded seeds' mean (0.20), the control's convergence step within
# CONVERGED_TOL (10% of its 3,000-step budget).
STUCK_TOL = 0.05
CONVERGED_TOL = 300
# The configuration the reproduction test retrains: two heads converge fastest per second.
REPRO_HEADS, REPRO_SEED = 2, 0


def test_record_matches_the_module_constants():
    assert tuple(RECORD["heads"]) == toy_models.AVAILABLE_HEADS
    assert tuple(RECORD["seeds"]) == toy_models.SEEDS
    assert RECORD["task"]["vocab"] == toy_models.TASK.vocab
    assert tuple(RECORD["task"]["offsets"]) == toy_models.TASK.offsets
    assert RECORD["d_model"] == toy_models.D_MODEL
    assert RECORD["train"]["steps"] == toy_models.TRAIN.steps
    assert len(RECORD["seeds"]) >= 3


@pytest.mark.parametrize("h", toy_models.AVAILABLE_HEADS)
def test_shipped_weights_reach_their_recorded_accuracy(h):
    x, y = toy_models.eval_set()
    for seed in RECORD["seeds"]:
        model = toy_models.load(h, seed)
        assert model.n_heads == h and model.seed == seed
        assert accuracy(model.params, x, y, h) == pytest.approx(RECORD["accuracy"][str(h)][str(seed)], abs=ANSWERS_TOL)
        assert sum(a.size for a in model.params.values()) == count_model_params(model.task, model.model)["total"]


def test_every_h_has_the_same_parameter_count():
    sizes = {h: sum(a.size for a in toy_models.load(h).params.values()) for h in toy_models.AVAILABLE_HEADS}
    assert len(set(sizes.values())) == 1, sizes


def test_the_recorded_result_several_heads_beat_one():
    table = toy_models.accuracy_table(RECORD)  # (len(heads), len(seeds))
    one, several = table[0], table[1:]
    assert RECORD["heads"][0] == 1
    assert several.min() > one.max() + 0.5  # every multi-head seed beats every single-head seed
    assert max(RECORD["long_budget"]["accuracy"].values()) < several.min()
    converged = RECORD["converged_step"]
    assert all(step is None for step in converged["1"].values())  # one head never got there
    assert all(step is not None for h in RECORD["heads"][1:] for step in converged[str(h)].values())


def test_retraining_one_configuration_reproduces_it():
    config = replace(toy_models.TRAIN, seed=REPRO_SEED)
    result = train(toy_models.TASK, ModelConfig(REPRO_HEADS, toy_models.D_MODEL), config)
    x, y = toy_models.eval_set()
    acc = accuracy(result.params, x, y, REPRO_HEADS)
    assert acc == pytest.approx(RECORD["accuracy"][str(REPRO_HEADS)][str(REPRO_SEED)], abs=ACC_TOL)
    shipped = toy_models.load(REPRO_HEADS, REPRO_SEED).params
    # Two-head training is not chaotic: a 1e-13 change of the initial weights moved W_Q by ~1e-12
    # after 600 steps (measured), so 1e-6 leaves room for another BLAS and still catches a change
    # in the data stream, the initialisation or the optimiser.
    for name in ("W_Q", "W_O", "tok_emb"):
        np.testing.assert_allclose(result.params[name], shipped[name], rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("h", toy_models.AVAILABLE_HEADS)
def test_attention_maps_interface(h):
    labels, weights = toy_models.attention_maps(h)
    n = toy_models.TASK.n
    assert isinstance(labels, list) and len(labels) == n and all(isinstance(s, str) for s in labels)
    assert weights.shape == (h, n, n)
    np.testing.assert_allclose(weights.sum(-1), 1.0)
    assert np.all(np.triu(weights, k=1) == 0)
    labels5, weights5 = toy_models.attention_maps(h, n=5, seed=3)
    assert len(labels5) == 5 and weights5.shape == (h, 5, 5)
    assert labels5 != labels[:5]  # another sample sequence


def test_two_heads_specialise_on_the_two_offsets():
    _, weights = toy_models.attention_maps(2)
    t = np.arange(max(toy_models.TASK.offsets), toy_models.TASK.n)
    a, b = toy_models.TASK.offsets
    on_a = weights[:, t, t - a].mean(-1)  # (h,)
    on_b = weights[:, t, t - b].mean(-1)
    assert sorted([int(on_a.argmax()), int(on_b.argmax())]) == [0, 1]  # one head per offset
    assert on_a.max() > 0.9 and on_b.max() > 0.9


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: toy_models.load(3), ValueError, r"AVAILABLE_HEADS=\(1, 2, 4, 8\)"),
        (lambda: toy_models.load(2, seed=99), ValueError, "one of the shipped seeds"),
        (lambda: toy_models.attention_maps(2, n=1), ValueError, r"n must be in \[2, 12\]"),
        (lambda: toy_models.attention_maps(2, n=13), ValueError, r"n must be in \[2, 12\]"),
        (lambda: toy_models.attention_maps("2"), TypeError, "n_heads must be a positive int"),
        (lambda: toy_models.attention_maps(2, seed=-1), ValueError, "seed must be a non-negative int"),
    ],
)
def test_toy_models_validate_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_run_experiment_save_and_load_round_trip(tmp_path):
    calls = []
    record, models = toy_models.run_experiment(
        heads=(1, 2), seeds=(0, 1), train_config=replace(toy_models.TRAIN, steps=5), long_seeds=(0,),
        progress=lambda *a: calls.append(a),
    )
    total = 4 * 5 + 5 * toy_models.LONG_FACTOR + 5 * (1 + toy_models.LONG_FACTOR)  # main, long, control
    assert [c[0] for c in calls] == list(range(1, total + 1)) and calls[-1][1] == total
    assert set(models) == {(1, 0), (1, 1), (2, 0), (2, 1)}
    assert record["control"]["steps"] == [5, 5 * toy_models.LONG_FACTOR]
    paths = toy_models.save(record, models, tmp_path)
    assert sorted(p.name for p in paths) == ["heads_1.npz", "heads_2.npz", "record.json"]
    assert toy_models.load_record(tmp_path) == json.loads(json.dumps(record))  # tuples become lists
    x, y = toy_models.eval_set()
    again = toy_models.load(2, seed=1, directory=tmp_path)
    assert accuracy(again.params, x, y, 2) == record["accuracy"]["2"]["1"]
    for k, a in models[(2, 1)].items():
        np.testing.assert_array_equal(again.params[k], a)
    assert toy_models.accuracy_table(record).shape == (2, 2)


def test_the_headline_experiment_recomputed():
    """Retrain, not read back: one single head with LONG_FACTOR x the budget stays near chance on
    the pair (one slot right, the other not), while the same head on CONTROL_TASK, with the same
    long budget, converges. Both are compared with the record that the README and notebook 08 cite."""
    seed = toy_models.LONG_SEEDS[0]
    long = replace(toy_models.TRAIN, steps=toy_models.TRAIN.steps * toy_models.LONG_FACTOR, seed=seed)
    one_head = ModelConfig(1, toy_models.D_MODEL)
    stuck = train(toy_models.TASK, one_head, long)
    control = train(toy_models.CONTROL_TASK, one_head, long)
    x, y = toy_models.eval_set()
    cx, cy = toy_models.eval_set(toy_models.CONTROL_TASK)
    rec_long, rec_control = RECORD["long_budget"], RECORD["control"]
    assert rec_long["steps"] == long.steps == rec_control["steps"][-1] and rec_control["seed"] == seed
    # the record, recomputed
    stuck_acc = accuracy(stuck.params, x, y, 1)
    control_acc = accuracy(control.params, cx, cy, 1)
    recorded_stuck = np.mean(list(rec_long["accuracy"].values()))
    assert stuck_acc == pytest.approx(recorded_stuck, abs=STUCK_TOL)
    assert converged_step(stuck.losses) is rec_long["converged_step"][str(seed)] is None
    assert control_acc == pytest.approx(rec_control["accuracy"][-1], abs=ACC_TOL)
    converged = converged_step(control.losses)
    assert converged == pytest.approx(rec_control["converged_step"][-1], abs=CONVERGED_TOL)
    # the claim itself: the control needs more than the shared budget and gets there within the
    # long one; the 16-token single head, with the same long budget, stays far below every
    # multi-head run, getting one slot of the pair but not both
    assert toy_models.TRAIN.steps < converged <= long.steps
    assert stuck_acc < toy_models.accuracy_table(RECORD)[1:].min() - 0.5
    assert max(slot_accuracy(stuck.params, x, y, 1)) > 0.9
