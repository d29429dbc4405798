"""OffsetPairTask: answers checked against a plain loop, seeding, order sensitivity, validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_core.training.tasks import IGNORE, OffsetPairTask


@st.composite
def tasks(draw):
    n = draw(st.integers(3, 10))
    a = draw(st.integers(1, n - 1))
    b = draw(st.integers(1, n - 1).filter(lambda v: v != a))
    return OffsetPairTask(draw(st.integers(2, 9)), n, (a, b))


@given(tasks(), st.integers(0, 2**16), st.integers(1, 4))
@settings(max_examples=50, deadline=None)
def test_targets_match_a_plain_loop(task, seed, batch):
    x, y = task.sample(seed, batch)
    a, b = task.offsets
    assert x.shape == y.shape == (batch, task.n)
    assert x.min() >= 0 and x.max() < task.vocab
    for i in range(batch):
        for t in range(task.n):
            if t < max(a, b):
                assert y[i, t] == IGNORE
            else:
                assert y[i, t] == task.vocab * x[i, t - a] + x[i, t - b]
    assert (y != IGNORE).sum() == batch * task.n_targets
    first, second = task.split_pair(y)
    keep = y != IGNORE
    np.testing.assert_array_equal(first[:, max(a, b):], x[:, max(a, b) - a : task.n - a])
    np.testing.assert_array_equal(second[keep], x[:, max(a, b) - b : task.n - b].ravel())


def test_the_answer_depends_on_the_order_of_the_two_offsets():
    x, _ = OffsetPairTask(8, 12, (1, 3)).sample(0, 50)
    y13 = OffsetPairTask(8, 12, (1, 3)).targets(x)
    y31 = OffsetPairTask(8, 12, (3, 1)).targets(x)
    keep = y13 != IGNORE
    a, b = np.divmod(y13[keep], 8)
    np.testing.assert_array_equal(y31[keep], 8 * b + a)  # the same pair, swapped
    assert (y13[keep] != y31[keep]).mean() > 0.5  # differs wherever the two tokens differ


def test_sample_is_deterministic_per_seed():
    task = OffsetPairTask()
    x0, y0 = task.sample(7, 16)
    x1, y1 = task.sample(7, 16)
    x2, _ = task.sample(8, 16)
    np.testing.assert_array_equal(x0, x1)
    np.testing.assert_array_equal(y0, y1)
    assert (x0 != x2).any()
    gen = np.random.default_rng(7)
    np.testing.assert_array_equal(task.sample(gen, 16)[0], x0)


def test_token_labels():
    task = OffsetPairTask(5, 4, (1, 2))
    assert task.token_labels(np.array([3, 0, 4, 1])) == ["0:3", "1:0", "2:4", "3:1"]
    with pytest.raises(ValueError, match=r"one sequence of shape \(4,\)"):
        task.token_labels(np.zeros((2, 4), dtype=int))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(vocab=1), ValueError, "vocab must be at least 2"),
        (dict(vocab=2.5), TypeError, "vocab must be a positive int"),
        (dict(n=0), ValueError, "n must be a positive int"),
        (dict(offsets=(2, 2)), ValueError, "two different distances"),
        (dict(offsets=(1, 12)), ValueError, "offsets must be < n=12"),
        (dict(offsets=(0, 1)), ValueError, "must be a positive int"),
        (dict(offsets=[1, 3]), TypeError, "offsets must be a tuple of two ints"),
    ],
)
def test_task_validates_its_fields(kwargs, error, match):
    with pytest.raises(error, match=match):
        OffsetPairTask(**kwargs)


def test_targets_and_split_validate_their_input():
    task = OffsetPairTask(4, 5, (1, 2))
    with pytest.raises(TypeError, match="integer numpy.ndarray"):
        task.targets(np.zeros((2, 5)))
    with pytest.raises(ValueError, match="N = n = 5"):
        task.targets(np.zeros((2, 6), dtype=int))
    with pytest.raises(ValueError, match=r"tokens in \[0, vocab=4\)"):
        task.targets(np.full((1, 5), 4))
    with pytest.raises(ValueError, match=r"\[0, V\^2=16\)"):
        task.split_pair(np.array([16]))
    with pytest.raises(ValueError, match="batch must be a positive int"):
        task.sample(0, 0)
