"""Every sentence of notebooks 00 to 06 that speaks of the clock is either about the method or
checked against the stored run by the lessons' rule (two times differ only when their gap is
larger than their spreads added up: ``mha_core.ui.lesson_figures.clearly_apart``).

A new timing sentence fails here until it is listed: as METHOD (how to measure, what to look
for, no result of this run) or in CHECKED, with the test that holds it to the stored numbers.
"""

from __future__ import annotations

import json
import re

import pytest
import test_lesson_claims_05 as claims_05
import test_lesson_claims_06 as claims_06
from lesson_claims import NOTEBOOKS

LESSONS = [f"0{i}" for i in range(7)]
TIMING = re.compile(r"\b(faster|slower|speed-?up|clock|tokens/s|GB/s|GFLOP/s|ms|milliseconds|takes? far more)\b",
                    re.I)

# sentence (a distinctive part of it) -> the test of the stored run that checks it
CHECKED = {
    "in the stored run the softmax takes far more than its $1/128$ share of the time, by more than the spreads":
        claims_05.test_the_softmax_takes_more_than_its_share_by_more_than_the_spreads,
    "on the clock it costs far more than its share of the operations":
        claims_05.test_the_softmax_takes_more_than_its_share_by_more_than_the_spreads,
    "on the clock it weighs far more than its share of the operations":
        claims_05.test_the_softmax_takes_more_than_its_share_by_more_than_the_spreads,
    "### Count and clock disagree":
        claims_05.test_the_softmax_takes_more_than_its_share_by_more_than_the_spreads,
    "and their GFLOP/s tends to fall": claims_05.test_the_narrow_matmuls_are_clearly_slower,
    "names the $h$ whose forward pass is clearly slower than $h=1$ in your run":
        claims_05.test_each_verdict_against_h1_follows_the_rule,
    "Whether this run's GQA step is faster than MHA's, and MQA's than GQA's, by more than the spreads":
        claims_06.test_stored_run_each_faster_verdict_follows_the_rule,
    "Where GQA and MQA decode faster than MHA (by more than the spreads), it is by less than the ratio":
        claims_06.test_stored_run_the_gain_falls_short_of_the_bytes_only_where_the_rule_says,
    "check by the rule whether the measured step is clearly slower":
        claims_06.test_stored_run_the_gain_falls_short_of_the_bytes_only_where_the_rule_says,
    "The weights are read at about the same rate in all three (the GB/s above)":
        claims_06.test_stored_run_weights_at_one_rate_the_cache_slower_the_smaller_it_is,
    "the GB/s show it, the smaller the cache, the fewer of its bytes the attention gets through per second":
        claims_06.test_stored_run_weights_at_one_rate_the_cache_slower_the_smaller_it_is,
    "the more of the cache they remove, the more of the step is work that did not shrink, and the speed-up stays":
        claims_06.test_stored_run_the_gain_falls_short_of_the_bytes_only_where_the_rule_says,
}

# sentences about the method or the plan, which state no result of the stored run
METHOD = (
    "notebook 05 puts them on the clock",
    "what \"multi-head is nearly free\"",
    "Section 4 shows that the clock disagrees.",
    '## 4 · "Multi-head is nearly free", on the clock',
    "On the clock, read only the gaps larger than the spreads.",
    "The clock also measures how well the CPU runs that work.",
    "The rule for reading the table: two times are **clearly apart**",
    "If \"nearly free\" holds on this CPU, the forward pass stays near the $h=1$ time",
    "Whether the clock agrees depends on $d_k$ and on the hardware",
    "An exponential costs a CPU many more cycles than a multiply-add",
    "how much faster GQA and MQA decode on this machine",
    "a smaller cache should also mean faster decoding; section 6 measures it.",
    "If a step took just the time needed to read its bytes",
    "A clock is noisy",
)


def _sentences(name: str) -> list[str]:
    cells = json.loads((NOTEBOOKS / name).read_text())["cells"]
    text = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    text = re.sub(r"\s+", " ", text)
    return [s for s in re.split(r"(?<=[.!?:])\s+(?=[A-Z*#(])| - ", text) if s.strip()]


def _timing_sentences() -> list[tuple[str, str]]:
    names = sorted(p.name for p in NOTEBOOKS.glob("0[0-6]_*.ipynb"))
    assert [n[:2] for n in names] == LESSONS
    return [(name, s) for name in names for s in _sentences(name) if TIMING.search(s)]


def test_every_timing_sentence_is_about_the_method_or_checked():
    unlisted = [(name, s) for name, s in _timing_sentences()
                if not any(part in s for part in (*CHECKED, *METHOD))]
    assert not unlisted, "timing sentences that no test holds to the stored run:\n" + "\n".join(
        f"{name}: {s}" for name, s in unlisted)


@pytest.mark.parametrize("part", list(CHECKED))
def test_each_checked_timing_sentence_is_in_a_lesson_and_its_check_passes(part):
    assert any(part in s for _, s in _timing_sentences()), f"no longer in 00-06: {part!r}"
    CHECKED[part]()  # the check against the stored run


def test_no_timing_sentence_rests_on_an_unmeasured_peak():
    assert not [s for _, s in _timing_sentences() if "peak" in s and "CPU" in s]
