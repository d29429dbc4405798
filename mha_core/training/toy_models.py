"""Trained tiny models shipped with the package, and the experiment that made them.

The experiment ("does splitting the same width into several heads help?"): the task
``OffsetPairTask(vocab=16, n=12, offsets=(1, 3))`` (name the tokens 1 and 3 places back),
the model of ``mha_core.training.trainer`` at ``d_model = 16`` with ``h`` in ``AVAILABLE_HEADS``, the same
training budget ``TRAIN`` and the seeds ``SEEDS`` for every ``h``. Only ``h`` changes; the
parameter count does not (``count_model_params``).

``scripts/train_toy_models.py`` (``make weights``) reruns it and rewrites ``mha_core/training/weights/``:
``heads_<h>.npz`` (every seed's weights) and ``record.json`` (configuration, accuracy table,
timings). ``load(h)`` and ``attention_maps(h)`` read them back instantly.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ..core.validate import check_positive_int
from .tasks import OffsetPairTask
from .trainer import (
    ModelConfig,
    Progress,
    TrainConfig,
    accuracy,
    converged_step,
    forward,
    slot_accuracy,
    train,
)

TASK = OffsetPairTask(vocab=16, n=12, offsets=(1, 3))
# Narrow on purpose: at d_model = 16 one head cannot pack two tokens *and* their order into one
# blend that a linear readout can read (at vocab 8 or d_model 32 it eventually can; see 08).
D_MODEL = 16
AVAILABLE_HEADS: tuple[int, ...] = (1, 2, 4, 8)
SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
# The same budget for every h: 600 Adam steps of 64 fresh sequences. Every multi-head run
# measured while choosing it had converged by step 250; the single head had not by step 4,000.
TRAIN = TrainConfig(steps=600, batch=64, lr=1e-2, seed=0)
# The single head again with LONG_FACTOR x the budget, to check that it is not merely slower.
LONG_FACTOR = 5
LONG_SEEDS: tuple[int, ...] = (0, 1, 2)
# A control where one head is NOT stuck: with 8 tokens (64 ordered pairs instead of 256) a single
# head finds a blend the linear readout can untangle, given the long budget.
CONTROL_TASK = replace(TASK, vocab=8)
# Held-out sequences for every accuracy in the record: 1,000 x 9 target positions.
EVAL_SEED = 12_345
EVAL_BATCH = 1_000

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
RECORD_NAME = "record.json"


@dataclass(frozen=True)
class ToyModel:
    """One shipped model: its weights, ``h``, the seed it was trained with and its accuracy."""

    params: dict[str, np.ndarray]
    n_heads: int
    seed: int
    accuracy: float
    task: OffsetPairTask
    model: ModelConfig


def eval_set(task: OffsetPairTask = TASK) -> tuple[np.ndarray, np.ndarray]:
    """The held-out sequences ``x`` (EVAL_BATCH, N) and answers ``y`` (EVAL_BATCH, N)."""
    return task.sample(EVAL_SEED, EVAL_BATCH)


def _heads_arg(n_heads) -> int:
    h = check_positive_int(n_heads, "n_heads")
    if h not in AVAILABLE_HEADS:
        raise ValueError(f"n_heads must be one of AVAILABLE_HEADS={AVAILABLE_HEADS}, got {h}")
    return h


def run_experiment(
    heads: tuple[int, ...] = AVAILABLE_HEADS,
    seeds: tuple[int, ...] = SEEDS,
    train_config: TrainConfig = TRAIN,
    long_seeds: tuple[int, ...] = LONG_SEEDS,
    progress: Progress | None = None,
) -> tuple[dict, dict[tuple[int, int], dict[str, np.ndarray]]]:
    """Train every ``(h, seed)`` and measure it.

    Parameters
    ----------
    heads, seeds : tuples of int
    train_config : TrainConfig
        The shared budget; its ``seed`` is replaced by each run's seed.
    long_seeds : tuple of int
        Seeds for the single head trained ``LONG_FACTOR`` times longer; the first also trains
        the single head on ``CONTROL_TASK`` with both budgets. ``()`` skips both.
    progress : callable ``(step, steps, loss)``, optional
        Called with the steps done over all runs.

    Returns
    -------
    record : dict
        JSON-ready: configuration, ``accuracy[h][seed]``, ``slot_accuracy[h][seed]``,
        ``seconds[h][seed]``, ``converged_step[h][seed]`` (``trainer.converged_step``, None if
        never), ``long_budget``, ``control`` and ``total_seconds``.
    models : dict mapping ``(h, seed)`` to the trained weights
    """
    for h in heads:
        ModelConfig(h, D_MODEL)  # validates h before any training starts
    x, y = eval_set()
    long = replace(train_config, steps=train_config.steps * LONG_FACTOR)
    runs = [("main", TASK, h, s, train_config) for h in heads for s in seeds]
    runs += [("long", TASK, 1, s, long) for s in long_seeds]
    if long_seeds:
        runs += [("control", CONTROL_TASK, 1, long_seeds[0], cfg) for cfg in (train_config, long)]
    total = sum(run[-1].steps for run in runs)
    done = 0
    record = {
        "task": asdict(TASK), "d_model": D_MODEL, "train": asdict(train_config),
        "eval": {"seed": EVAL_SEED, "batch": EVAL_BATCH}, "heads": list(heads), "seeds": list(seeds),
        "accuracy": {}, "slot_accuracy": {}, "seconds": {}, "converged_step": {},
        "long_budget": {"steps": long.steps, "seeds": list(long_seeds), "accuracy": {}, "slot_accuracy": {},
                        "seconds": {}, "converged_step": {}},
        "control": {"task": asdict(CONTROL_TASK), "n_heads": 1, "seed": long_seeds[0] if long_seeds else None,
                    "steps": [], "accuracy": [], "slot_accuracy": [], "converged_step": []},
    }
    models = {}
    start = time.perf_counter()
    for kind, task, h, seed, cfg in runs:
        offset = done

        def report(step, steps, loss, offset=offset):
            if progress is not None:
                progress(offset + step, total, loss)

        result = train(task, ModelConfig(h, D_MODEL), replace(cfg, seed=seed), progress=report)
        done += cfg.steps
        ex, ey = (x, y) if task == TASK else eval_set(task)
        acc, slots = accuracy(result.params, ex, ey, h), list(slot_accuracy(result.params, ex, ey, h))
        converged = converged_step(result.losses)
        if kind == "long":
            record["long_budget"]["accuracy"][str(seed)] = acc
            record["long_budget"]["slot_accuracy"][str(seed)] = slots
            record["long_budget"]["seconds"][str(seed)] = round(result.seconds, 2)
            record["long_budget"]["converged_step"][str(seed)] = converged
            continue
        if kind == "control":
            for key, value in (("steps", cfg.steps), ("accuracy", acc), ("slot_accuracy", slots),
                               ("converged_step", converged)):
                record["control"][key].append(value)
            continue
        models[(h, seed)] = result.params
        record["accuracy"].setdefault(str(h), {})[str(seed)] = acc
        record["slot_accuracy"].setdefault(str(h), {})[str(seed)] = slots
        record["seconds"].setdefault(str(h), {})[str(seed)] = round(result.seconds, 2)
        record["converged_step"].setdefault(str(h), {})[str(seed)] = converged
    record["total_seconds"] = round(time.perf_counter() - start, 1)
    return record, models


def save(record: dict, models: dict, directory: Path | str = WEIGHTS_DIR) -> list[Path]:
    """Write ``heads_<h>.npz`` (keys ``seed<s>/<name>``) and ``record.json``; return the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for h in sorted({h for h, _ in models}):
        arrays = {f"seed{s}/{k}": a for (hh, s), p in models.items() if hh == h for k, a in p.items()}
        path = directory / f"heads_{h}.npz"
        np.savez_compressed(path, **arrays)
        paths.append(path)
    path = directory / RECORD_NAME
    path.write_text(json.dumps(record, indent=1) + "\n")
    return [*paths, path]


def load_record(directory: Path | str = WEIGHTS_DIR) -> dict:
    """The shipped ``record.json``: configuration, accuracy table and timings."""
    return json.loads((Path(directory) / RECORD_NAME).read_text())


def accuracy_table(record: dict | None = None) -> np.ndarray:
    """Accuracies as an array of shape (len(heads), len(seeds)), rows in ``record["heads"]`` order."""
    record = load_record() if record is None else record
    return np.array([[record["accuracy"][str(h)][str(s)] for s in record["seeds"]] for h in record["heads"]])


def load(n_heads: int, seed: int = 0, directory: Path | str = WEIGHTS_DIR) -> ToyModel:
    """A shipped model.

    Parameters
    ----------
    n_heads : int
        One of ``AVAILABLE_HEADS``.
    seed : int, default 0
        Which training seed (one of the record's ``seeds``).
    """
    h = _heads_arg(n_heads)
    record = load_record(directory)
    if seed not in record["seeds"]:
        raise ValueError(f"seed must be one of the shipped seeds {record['seeds']}, got {seed!r}")
    prefix = f"seed{seed}/"
    with np.load(Path(directory) / f"heads_{h}.npz") as f:
        params = {k[len(prefix):]: f[k] for k in f.files if k.startswith(prefix)}
    task = OffsetPairTask(record["task"]["vocab"], record["task"]["n"], tuple(record["task"]["offsets"]))
    return ToyModel(params, h, seed, record["accuracy"][str(h)][str(seed)], task, ModelConfig(h, record["d_model"]))


def attention_maps(n_heads: int, n: int | None = None, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Attention weights of the shipped ``h``-head model (training seed 0) on one task sequence.

    Parameters
    ----------
    n_heads : int
        One of ``AVAILABLE_HEADS``.
    n : int, optional
        Sequence length ``N``, 2 .. ``TASK.n``; default ``TASK.n``.
    seed : int, default 0
        Seeds the sample sequence (not the model).

    Returns
    -------
    labels : list of N str, ``"t:token"`` per position
    weights : ndarray of shape (h, N, N); row ``i`` is where query ``i`` looks (causal: zero
        above the diagonal).
    """
    model = load(n_heads)
    n_max = model.task.n
    n = n_max if n is None else check_positive_int(n, "n")
    if not 2 <= n <= n_max:
        raise ValueError(f"n must be in [2, {n_max}] (the task's sequence length), got n={n}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    x, _ = model.task.sample(int(seed), 1)  # (1, N_max)
    _, cache = forward(model.params, x[:, :n], model.n_heads)
    return model.task.token_labels(x[0])[:n], cache["mha"]["weights"][0]  # (h, N, N)
