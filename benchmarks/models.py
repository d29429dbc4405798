"""The real models: speed from a sentence to its attention maps, and memory per kernel.

Speed: the time from a 32-token sentence (text, tokenised in the timed call) to every layer's
and every head's attention weights as a NumPy array, ours (``model.attention(model.encode(text))``)
against transformers (eager attention, ``output_attentions=True``) on the same weights, timed
interleaved in the same run. transformers loads MiniLM from the same safetensors and SmolLM2
from the same GGUF (dequantised to float32), exactly as the oracle tests do.

Memory: real processes. Each child imports the dashboard's panels (``mha_core.ui.heads_panel`` and the others,
with matplotlib and ipywidgets) and ``mha_core.models``, loads the model, runs one forward (as the dashboard's panel does on its first sentence) and waits; the parent reads
``/proc/<pid>/smaps_rollup`` of every child. USS (``Private_Clean + Private_Dirty``) is what
a process alone holds; PSS shares every shared page among the processes that map it, so the
sum of PSS over 20 children is what the 20 together cost. A kernel that is the only one mapping
the cache counts the weight pages it touched as its own ("private clean": page cache, which a
second kernel would share and the system can drop), so for one kernel the anonymous memory
(``Anonymous``: what it alone holds and nobody could share) is reported too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

from .timing import interleaved, numpy_threads, stats

NAMES = ("minilm", "smollm2")
SENTENCE_TOKENS = 32
TARGET_S = {"minilm": 0.3, "smollm2": 2.0}  # the targets, in seconds, judged at one thread
PASSAGE = ("The animal didn't cross the street because it was too tired, so the farmer led it home "
           "slowly along the river while the children in the village watched from the old stone "
           "bridge and the sun went down behind the hills")
KERNELS = 20
PROMPT_TOKENS, NEW_TOKENS = 64, 32  # cached generation: the prompt and output lengths
MB = 2**20

# What one child runs: import what a dashboard kernel imports (the panels: matplotlib,
# ipywidgets), load the models named in argv[1], one forward each, report, then wait.
_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import mha_core.ui.cost_panel, mha_core.ui.heads_panel, mha_core.ui.kv_panel, mha_core.ui.shapes_panel
from mha_core.models import load
names = [n for n in sys.argv[1].split(",") if n]
for name in names:
    m = load(name)
    m.attention(m.encode(sys.argv[2]))
print(json.dumps({"load_and_first_forward_s": time.perf_counter() - t0}), flush=True)
sys.stdin.read()
"""


def sentence(model, n: int = SENTENCE_TOKENS) -> str:
    """The longest prefix of PASSAGE (in words) that the model encodes to at most ``n`` tokens."""
    words = PASSAGE.split()
    best = words[0]
    for k in range(1, len(words) + 1):
        text = " ".join(words[:k])
        if model.encode(text).size > n:
            break
        best = text
    return best


def _reference(name: str):
    """transformers' model and tokenizer on the same files as ours, or None if not installed."""
    try:
        import torch
        import transformers
    except ImportError:
        return None
    from mha_core.models import cache_dir
    from mha_core.models.store import SOURCES

    src = cache_dir() / name / "source"
    if name == "minilm":
        model = transformers.AutoModel.from_pretrained(src, attn_implementation="eager").eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(src)
    else:
        gguf = SOURCES[name].weights
        tokenizer = transformers.AutoTokenizer.from_pretrained(src, gguf_file=gguf)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            src, gguf_file=gguf, attn_implementation="eager", dtype=torch.float32).eval()
    return model, tokenizer


def speed(name: str, quick: bool, log=print) -> dict:
    """Sentence -> every layer's attention maps, ours vs transformers, interleaved; at one
    thread each (as the dashboard's kernels run, ``OPENBLAS_NUM_THREADS=1``) and at the
    default threads."""
    from mha_core.models import load

    t0 = time.perf_counter()
    ours = load(name)
    load_s = time.perf_counter() - t0
    text = sentence(ours)
    n = int(ours.encode(text).size)
    fns = {"ours": lambda: ours.attention(ours.encode(text))}
    t0 = time.perf_counter()
    ref = _reference(name)
    ref_load_s = time.perf_counter() - t0
    row: dict = {"model": name, "label": ours.label, "N": n, "sentence": text,
                 "ours_load_s": load_s, "target_s": TARGET_S[name]}
    set_torch_threads = None
    if ref is not None:
        import torch

        model, tokenizer = ref

        def theirs():
            with torch.no_grad():
                ids = tokenizer(text, return_tensors="pt")["input_ids"]
                out = model(ids, output_attentions=True)
                return torch.stack(out.attentions)[:, 0].numpy()  # (layers, h, N, N)

        fns["transformers"] = theirs
        row["max_abs_diff"] = float(np.abs(theirs() - fns["ours"]()).max())  # the same maps, checked
        row["transformers_load_s"] = ref_load_s
        set_torch_threads = torch.set_num_threads
        default_torch = torch.get_num_threads()
    budget = {"budget_s": 4.0 if quick else 12.0, "min_reps": 3 if quick else 5, "max_reps": 10 if quick else 25}
    row["time"] = {}
    for label, threads in (("one thread each", 1), ("default threads", None)):
        with threadpool_limits(limits=threads, user_api="blas"):
            if set_torch_threads:
                set_torch_threads(threads or default_torch)
            t = interleaved(fns, **budget)
        if set_torch_threads:
            set_torch_threads(default_torch)
        t["threads"] = {"numpy": threads or numpy_threads(), "torch": threads or (default_torch if ref else None)}
        row["time"][label] = t
        msg = f"  {name} ({label}): N={n}, ours {t['ours']['median'] * 1e3:.0f} ms"
        if "transformers" in t:
            msg += (f", transformers {t['transformers']['median'] * 1e3:.0f} ms "
                    f"({t['transformers']['median'] / t['ours']['median']:.2f}x)")
        log(msg)
    one = row["time"]["one thread each"]
    row["met_target"] = one["ours"]["median"] <= TARGET_S[name]
    if "transformers" in one:
        row["speedup_vs_transformers"] = one["transformers"]["median"] / one["ours"]["median"]
        log(f"  {name}: max |diff| of the maps {row['max_abs_diff']:.1e}")
    else:
        log(f"  {name}: transformers not installed: no reference")
    log(f"  {name}: target {TARGET_S[name]} s at one thread: {'met' if row['met_target'] else 'missed'}")
    return row


def _smaps(pid: int) -> dict[str, float]:
    """Rss, Pss, USS and shared memory of ``pid``, in MiB, from /proc/<pid>/smaps_rollup."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return {"rss_mb": fields["Rss"], "pss_mb": fields["Pss"],
            "uss_mb": fields["Private_Clean"] + fields["Private_Dirty"],
            "anon_mb": fields["Anonymous"],  # private memory no other process could share
            "shared_mb": fields["Shared_Clean"] + fields["Shared_Dirty"]}


def kernels(names: tuple[str, ...], count: int, text: str) -> dict:
    """Start ``count`` processes that each load ``names`` and run one forward; measure them."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}  # as `make dashboard` runs its kernels
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, ",".join(names), text], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(count)]
    try:
        ready = [json.loads(p.stdout.readline()) for p in procs]
        mem = [_smaps(p.pid) for p in procs]
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)
    uss = [m["uss_mb"] for m in mem]
    return {"models": list(names), "processes": count,
            "uss_mb": stats(uss), "pss_mb": stats([m["pss_mb"] for m in mem]),
            "rss_mb": stats([m["rss_mb"] for m in mem]), "anon_mb": stats([m["anon_mb"] for m in mem]),
            "total_uss_mb": sum(uss), "total_pss_mb": sum(m["pss_mb"] for m in mem),
            "load_and_first_forward_s": stats([r["load_and_first_forward_s"] for r in ready])}


def memory(quick: bool, log=print) -> dict:
    """USS of one kernel with each model, and of 20 kernels with both."""
    from mha_core.models import load

    text = "The animal didn't cross the street because it was too tired."
    out: dict = {"weights_mb": {}}
    for name in NAMES:
        out["weights_mb"][name] = sum(a.nbytes for a in load(name).arrays.values()) / MB
    out["baseline"] = kernels((), 1, text)
    for name in NAMES:
        out[name] = kernels((name,), 1, text)
        log(f"  one process with {name}: USS {out[name]['uss_mb']['median']:.0f} MB, of which anonymous "
            f"{out[name]['anon_mb']['median']:.0f} MB (no model: USS {out['baseline']['uss_mb']['median']:.0f} MB, "
            f"anonymous {out['baseline']['anon_mb']['median']:.0f} MB); float32 weights "
            f"{out['weights_mb'][name]:.0f} MB, mapped read-only")
    count = 4 if quick else KERNELS
    many = kernels(NAMES, count, text)
    out["many"] = many
    copies = count * sum(out["weights_mb"].values())
    log(f"  {count} processes with both models: USS {many['total_uss_mb']:.0f} MB in all "
        f"(median {many['uss_mb']['median']:.0f} MB each), PSS {many['total_pss_mb']:.0f} MB in all; "
        f"{count} private float32 copies would be {copies:,.0f} MB of weights alone")
    out["private_copies_mb"] = copies
    return out


def generation(quick: bool, log=print) -> dict:
    """SmolLM2 writing ``NEW_TOKENS`` greedy tokens after a ``PROMPT_TOKENS``-token prompt, with
    the KV cache (``write(use_cache=True)``: prefill, then one decode_step per layer per token)
    and without (``use_cache=False``: the whole sequence again per token), interleaved in the
    same run; the same tokens are checked first. Also the cache's bytes against
    ``kv_cache_bytes`` (notebook 06's formula)."""
    from mha_core import MHAConfig, kv_cache_bytes
    from mha_core.models import load

    m = load("smollm2")
    prompt = m.encode(f"{PASSAGE}. {PASSAGE}.")[:PROMPT_TOKENS]  # (64,): the passage twice, cut
    if prompt.size != PROMPT_TOKENS:
        raise ValueError(f"the prompt has {prompt.size} tokens, expected {PROMPT_TOKENS}")
    runs = {"with cache": lambda: list(m.write(prompt, NEW_TOKENS, use_cache=True)),
            "without cache": lambda: list(m.write(prompt, NEW_TOKENS, use_cache=False))}
    cached, full = runs["with cache"](), runs["without cache"]()
    same = [s.id for s in cached] == [s.id for s in full]
    n_new = len(cached)
    t = interleaved(runs, budget_s=20.0 if quick else 60.0, min_reps=1 if quick else 3, max_reps=3 if quick else 7)
    rate = {k: n_new / v["median"] for k, v in t.items()}
    stored = prompt.size + n_new - 1  # tokens in the cache when the last token was chosen
    cfg = MHAConfig(m.d_model, m.n_heads, n_kv_heads=m.n_kv_heads)
    formula = kv_cache_bytes(cfg, stored, n_layers=m.n_layers, dtype=np.float32)
    row = {"prompt_tokens": int(prompt.size), "new_tokens": n_new, "same_tokens": same, "time": t,
           "tokens_per_s": rate, "speedup": rate["with cache"] / rate["without cache"],
           "cache_bytes": cached[-1].cache_bytes, "formula_bytes": formula}
    log(f"  smollm2 writing {n_new} tokens after {prompt.size}: with the KV cache {rate['with cache']:.2f} tokens/s, "
        f"without {rate['without cache']:.2f} tokens/s ({row['speedup']:.1f}x); same tokens: {same}; "
        f"cache {row['cache_bytes']:,} bytes, 06's formula {formula:,}")
    return row


def run(quick: bool = False, log=print) -> dict:
    from mha_core.models import ModelCacheError

    try:
        rows = [speed(name, quick, log) for name in NAMES]
    except ModelCacheError as err:
        log(f"  not measured: {err}")
        return {"status": "not measured", "reason": str(err)}
    return {"status": "measured", "speed": rows, "generation": generation(quick, log), "memory": memory(quick, log)}
