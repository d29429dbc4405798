"""Notebook 03 (the worked example): each claim of its prose, checked next to the sentence it defends.

The worked example's numbers are printed by the notebook; strict nbval proves a fresh run prints
them again, and these checks tie each printed number to its formula.
"""

from __future__ import annotations

from lesson_claims import Claims

NB = "03_worked_example.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    r"$d_{model}=512$, $h=8$: $d_k=64$",
    after="cfg = MHAConfig(d_model=512, n_heads=8)",
)
def d_k_is_64(d_k):
    assert d_k == 64


@CLAIMS(
    r"`trace_config` runs the layer once on random input and lists the shape of every array it computes",
    after="trace_100 = trace_config(cfg, N, seed=0)",
)
def traced_shapes(trace_100, h, N, d_k, d_model):
    shapes = dict(trace_100.steps)
    assert shapes['Q heads: transpose'] == (h, N, d_k)
    assert shapes['scores = Q K^T / sqrt(d_k)'] == (h, N, N)
    assert shapes['out = concat @ W_O'] == shapes['X'] == (N, d_model)


@CLAIMS(
    r"parameters $4 \times 262{,}144 = 1{,}048{,}576$, independent of $h$.",
    after="params = count_params(cfg)",
)
def parameters_independent_of_h(params, d_model, arrays, count_params, MHAConfig):
    assert all(params[name] == d_model * d_model == 262_144 for name in ('W_Q', 'W_K', 'W_V', 'W_O'))
    assert params['total'] == 4 * d_model**2 == 1_048_576
    assert sum(w.size for w in arrays.values()) == params['total']
    assert all(count_params(MHAConfig(d_model, hh))['total'] == params['total'] for hh in (1, 2, 4, 16))


@CLAIMS(
    r"$N=100$: $104{,}857{,}600$ projection MACs $+ 10{,}240{,}000$ attention MACs $= 115{,}097{,}600$ "
    r"MACs, about 230 M FLOPs; projections are about $10\times$ the attention core.",
    after="macs_100 = count_macs(cfg, N)",
)
def macs_at_n_100(proj, N, d_model, attn, total, flops, ratio_100):
    assert proj == 4 * N * d_model**2 == 104_857_600
    assert attn == 2 * N**2 * d_model == 10_240_000
    assert total == proj + attn == 115_097_600
    assert round(flops / 1e6, -1) == 230
    assert round(ratio_100) == 10


@CLAIMS(
    r"The ledger of `trace_config` also holds the MACs of every matrix product of that run",
    after="def traced_terms(ledger)",
)
def tracer_counts_the_macs(traced_terms, trace_100, proj, attn, total):
    assert traced_terms(trace_100) == (proj, attn)
    assert trace_100.total_macs() == total


@CLAIMS(
    r"$N=2000$: about 2.1 B projection MACs against about 4.1 B attention MACs: the quadratic term wins.",
    after="N_long = 2000",
)
def macs_at_n_2000(proj_long, attn_long, N_long, d_model, traced_terms, trace_long):
    assert (proj_long, attn_long) == (4 * N_long * d_model**2, 2 * N_long**2 * d_model)
    assert round(proj_long / 1e9, 1) == 2.1
    assert round(attn_long / 1e9, 1) == 4.1
    assert attn_long > proj_long
    assert traced_terms(trace_long) == (proj_long, attn_long)


@CLAIMS(
    r"the scan finds it for several widths, and the two terms are exactly equal there.",
    after="def crossover(config: MHAConfig, n_max: int)",
)
def crossover_at_2_d_model_for_several_widths(crossover, MHAConfig, count_macs):
    assert all(crossover(MHAConfig(w, 8), 4 * w) == 2 * w for w in (256, 512, 1024))
    assert all(count_macs(MHAConfig(w, 8), 2 * w)['attention'] == count_macs(MHAConfig(w, 8), 2 * w)['projections'] for w in (256, 512, 1024))


@CLAIMS(
    r"The terms are equal at exactly $N = 2\,d_{model}$ (1,024 here).",
    after="def crossover(config: MHAConfig, n_max: int)",
)
def crossover_is_1024(N_star):
    assert N_star == 1_024


@CLAIMS(
    r"four more vectors: the last line prints that count too.",
    after="with_biases = count_params(",
)
def parameters_with_biases(with_biases, d_model, init_params, MHAConfig, h):
    assert with_biases == 4 * d_model**2 + 4 * d_model == 1_050_624
    assert sum(a.size for a in init_params(MHAConfig(d_model, h, bias=True), rng=0).values()) == with_biases


@CLAIMS(
    r"The head count cancels: $h \cdot N^2 \cdot d_k = N^2 \cdot d_{model}$.",
    after="print(f\"h·N²·d_k = ",
)
def head_count_cancels(h, N, d_k, d_model, count_macs, cfg):
    assert h * N**2 * d_k == N**2 * d_model
    assert count_macs(cfg, N)["attention"] == 2 * h * N**2 * d_k
    assert count_macs(cfg, N)["projections"] == 4 * N * d_model * d_model


@CLAIMS(
    r"With a batch of $B$ sequences every array gains a leading axis of size $B$ and nothing else changes",
    after="trace_b = trace_config(cfg, N, batch=2, seed=0)",
)
def batch_adds_a_leading_axis(trace_b, trace_100):
    assert [step for step, _ in trace_b.steps] == [step for step, _ in trace_100.steps]
    assert all(shape_b == (2, *shape) for (_, shape_b), (_, shape) in zip(trace_b.steps, trace_100.steps, strict=True))
    assert trace_b.total_macs() == 2 * trace_100.total_macs()


test_quotes, test_claim = CLAIMS.tests()
