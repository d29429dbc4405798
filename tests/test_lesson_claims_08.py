"""Notebook 08 (why several heads): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

from lesson_claims import Claim, claim_tests

NB = "08_why_several_heads.ipynb"
# the lesson itself never calls trainer.accuracy, so the check imports it; two answers of slack:
# an exact tie may flip
ACCURACY = "__import__('mha_core.training.trainer', fromlist=['accuracy']).accuracy"
SHIPPED = (f"all(abs({ACCURACY}(toy_models.load(h).params, x_eval, y_eval, h) - accs[0]) <= 2 / n_eval "
           "for h, accs in zip(heads, table, strict=True))")
CLAIMS = [
    Claim(r"the model must name the **ordered pair** $(x_{t-a},\ x_{t-b})$",
          "task = toy_models.TASK", "(first[0, t], second[0, t]) == (x[0, t - a], x[0, t - b])"),
    Claim(r"$d_{model}$, the parameter count, the training budget and the seeds are the same for every $h$.",
          "record = toy_models.load_record()",
          "len({c['total'] for c in counts.values()}) == 1 and all(sum(p.size for p in "
          "toy_models.load(h).params.values()) == counts[h]['total'] for h in heads)"),
    Claim(r"Everything above came from the shipped weights", "table = toy_models.accuracy_table(record)", SHIPPED),
    Claim(r"Every multi-head model solves the task on every seed, and well within the first half of the "
          r"budget; the single head is stuck near 0.2 on every seed.",
          'conv = record["converged_step"]',
          "one.max() < 0.3 and several.min() > 0.99 and all(v is None for v in conv['1'].values()) "
          "and slowest_multi < budget['steps'] / 2"),
    Claim(r"Five times the steps changes nothing.", 'long = record["long_budget"]', "long_acc.max() < 0.35"),
    Claim(r"Per token, the single head gets **one** of the two tokens right almost always (which one depends "
          r"on the seed), and the other several times more often than a guess",
          'long = record["long_budget"]',
          "slots.max(1).min() > 0.85 and slots.min(1).max() < 0.35 and 2 < lo and hi < 6"),
    Claim(r"splitting its one softmax roughly in half between them",
          "PLACES_SHOWN = 6", "0.3 < w1[a] < 0.7 and 0.3 < w1[b] < 0.7"),
    Claim(r"With two heads, each specialises on one offset and puts nearly all its weight there",
          "PLACES_SHOWN = 6",
          "{int(profiles[2][:, a].argmax()), int(profiles[2][:, b].argmax())} == {0, 1} "
          "and profiles[2][:, a].max() > 0.9 and profiles[2][:, b].max() > 0.9"),
    Claim(r"with four or eight, several heads share each offset.",
          "PLACES_SHOWN = 6",
          "all(profiles[h][:, a].max() > 0.85 and profiles[h][:, b].max() > 0.85 for h in heads[1:])"),
    Claim(r"First each head alone, then the least important ones (those whose removal alone costs least) "
          r"together, one more at a time.",
          "acc_without = head_ablation(params8, x_eval, y_eval, h)",
          "acc_without.max() > 0.99 and acc_without.min() < 0.9"),
    Claim(r"With four heads no head can go either.", "TOLERANCE = 0.01", "max(prunable[4]) == 0"),
    Claim(r"With two heads, both are essential: without either one, the model still names its own token but "
          r"can only guess the other",
          "TOLERANCE = 0.01",
          "max(prunable[2]) == 0 and np.all(np.abs(one_left - 1 / task.vocab) < 0.02)"),
    Claim(r"With eight heads there is slack: on every seed at least one head can go at a cost of at most one "
          r"point of accuracy",
          "TOLERANCE = 0.01", "min(prunable[8]) >= 1"),
    Claim(r"It is not a majority here, though", "TOLERANCE = 0.01", "max(prunable[8]) < 8 / 2"),
    Claim(r"With fewer pairs to separate, one head gets there, but only with the long budget",
          'control = record["control"]',
          "control['accuracy'][0] < 0.5 and control['accuracy'][-1] > 0.99"),
    Claim(r"many times more steps than any multi-head model needed on the harder, 16-token task.",
          'control = record["control"]', "late > 5 * slowest_multi"),
    Claim(r"What limits it is room: 256 ordered pairs to keep apart in a 16-wide blend.",
          'control = record["control"]', "task.vocab**2 == 256 and d_model == 16"),
    Claim(r"$n_{vocab} = 8$ (64 pairs)", 'control = record["control"]', "control['task']['vocab']**2 == 64"),
]

test_quotes, test_claim = claim_tests(NB, CLAIMS)
