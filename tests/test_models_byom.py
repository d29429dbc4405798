"""Bring your own model: ``load(path)`` on a Hugging Face folder of each supported family, against
``transformers`` on the same tiny random checkpoint (tests/byom_checkpoints.py writes them with
transformers itself: BertConfig, GPT2Config, LlamaConfig, MistralConfig, Qwen2Config).

A GGUF file of the Llama architecture (written with the ``gguf`` package as llama.cpp lays one
out, its feed-forward matrices quantised to Q8_0) is checked against transformers reading the
same file (``gguf_file=``), which dequantises it independently.

Float32 tolerances, checked on every layer and every sequence (the worst differences seen when
this was written are printed with ``-s``): attention weights within 1e-5 (seen: 9e-6), the
logits of the decoders within 1e-4 (seen: 3e-5), BERT's hidden states within 1e-5 (seen: 2e-6).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from byom_checkpoints import KINDS, TEXTS, train_tokenizer, write_checkpoint, write_gguf

from mha_core.models import ModelMemoryError, describe, load

pytestmark = pytest.mark.transformers
ATTENTION_TOL = 1e-5
LOGITS_TOL = 1e-4
HIDDEN_TOL = 1e-5
DECODERS = tuple(k for k in KINDS if k != "bert")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """kind -> (folder, the transformers reference reloaded from it)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("byom")
    return {kind: (root / kind, write_checkpoint(kind, root / kind)) for kind in KINDS}


def _sequences(model) -> list[np.ndarray]:
    """The texts, and a random sequence repeated twice (near the longest the tiny models take)."""
    rng = np.random.default_rng(0)
    half = rng.integers(5, model.vocab_size - 8, size=min(model.max_tokens, 60) // 2)
    return [model.encode(t) for t in TEXTS] + [np.concatenate([half, half])]


def _reference(ref, ids):
    import torch

    with torch.no_grad():
        return ref(torch.from_numpy(ids)[None], output_attentions=True, output_hidden_states=True)


def _copy(checkpoints, kind, tmp_path):
    """A fresh copy of ``kind``'s folder, to break."""
    return shutil.copytree(checkpoints[kind][0], tmp_path / kind)


def _edit_config(folder, **changes):
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("kind", KINDS)
def test_attention_and_logits_match_transformers(checkpoints, kind):
    folder, ref = checkpoints[kind]
    model = load(folder)
    assert (model.causal, model.n_layers) == (kind != "bert", 2)
    worst = {"attention": 0.0, "output": 0.0}
    for ids in _sequences(model):
        ours, theirs = model.forward(ids), _reference(ref, ids)
        assert len(theirs.attentions) == model.n_layers
        for layer, w in enumerate(theirs.attentions):
            err = float(np.abs(ours.attention[layer] - w[0].numpy()).max())
            assert err < ATTENTION_TOL, f"{kind}: attention of layer {layer} off by {err:.2e} (N={ids.size})"
            worst["attention"] = max(worst["attention"], err)
        if kind == "bert":  # an encoder: every layer's hidden state, the last one included
            for layer, hidden in enumerate(theirs.hidden_states):
                err = float(np.abs(ours.hidden[layer] - hidden[0].numpy()).max())
                assert err < HIDDEN_TOL, f"bert: hidden state {layer} off by {err:.2e} (N={ids.size})"
                worst["output"] = max(worst["output"], err)
        else:
            err = float(np.abs(ours.logits - theirs.logits[0].numpy()).max())
            assert err < LOGITS_TOL, f"{kind}: logits off by {err:.2e} (N={ids.size})"
            worst["output"] = max(worst["output"], err)
        # the random weights make peaked heads: a wrong mask or RoPE layout could not hide in uniform maps
        assert ours.attention.max() > 0.5
    print(f"\n{kind} vs transformers, max abs diff: attention {worst['attention']:.1e}, "
          f"{'hidden states' if kind == 'bert' else 'logits'} {worst['output']:.1e}")


@pytest.mark.parametrize("kind", DECODERS)
def test_greedy_writing_matches_transformers_generate(checkpoints, kind):
    """Cached writing, recomputed writing and transformers' greedy generate give the same tokens."""
    import torch

    folder, ref = checkpoints[kind]
    model = load(folder)
    prompt = model.encode("The capital of France is")
    cached = [s.id for s in model.write(prompt, 8)]
    assert [s.id for s in model.write(prompt, 8, use_cache=False)] == cached
    with torch.no_grad():
        theirs = ref.generate(torch.from_numpy(prompt)[None], max_new_tokens=8, do_sample=False,
                              pad_token_id=0)[0, prompt.size:].tolist()
    n = min(len(cached), len(theirs))  # both stop at the same end-of-text token
    assert n >= 1 and cached[:n] == theirs[:n]


@pytest.mark.parametrize("kind", KINDS)
def test_the_interface_on_every_family(checkpoints, kind):
    model = load(checkpoints[kind][0])
    assert load(checkpoints[kind][0]) is model  # one copy per process
    ids = model.encode("Any unicode: naïve 東京 🙂")
    assert len(model.tokens(ids)) == ids.size
    f = model.forward(ids)
    np.testing.assert_allclose(f.attention.sum(-1), 1.0, atol=1e-5)
    if model.causal:
        assert np.all(np.triu(f.attention, 1) == 0)
    keep = np.ones((model.n_layers, model.n_heads), dtype=bool)
    np.testing.assert_array_equal(model.forward(ids, head_mask=keep).hidden, f.hidden)
    keep[1, 0] = False
    assert np.abs(model.forward(ids, head_mask=keep).hidden[2] - f.hidden[2]).max() > 1e-3
    assert "float32" in model.label and not model.quantised
    assert model.name == str(checkpoints[kind][0].resolve())


def test_float32_weights_stay_memory_mapped(checkpoints):
    model = load(checkpoints["llama"][0])
    for key in ("tok_embed", "layer0.W_V", "layer1.W_down", "lm_head"):
        a = model.arrays[key]
        assert a.dtype == np.float32 and not a.flags.writeable, key  # a read-only view of the file
    model = load(checkpoints["gpt2"][0])
    assert np.shares_memory(model.arrays["layer0.W_Q"], model.arrays["layer0.W_K"].base)  # views of c_attn


def test_a_sharded_checkpoint_loads_the_same(checkpoints, tmp_path):
    import torch

    ref = write_checkpoint("qwen2", tmp_path / "sharded", max_shard_size="60KB")
    assert len(list((tmp_path / "sharded").glob("model-*-of-*.safetensors"))) > 1
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    model = load(tmp_path / "sharded")
    ids = model.encode(TEXTS[0])
    with torch.no_grad():
        theirs = ref(torch.from_numpy(ids)[None]).logits[0].numpy()
    assert np.abs(model.logits(ids) - theirs).max() < LOGITS_TOL


def test_a_bfloat16_checkpoint_is_converted_to_float32(tmp_path):
    torch = pytest.importorskip("torch")  # a reference library, like the checkpoints fixture's
    pytest.importorskip("transformers")

    ref = write_checkpoint("llama", tmp_path / "bf16", dtype=torch.bfloat16)
    model = load(tmp_path / "bf16")
    assert model.arrays["tok_embed"].dtype == np.float32
    ids = model.encode(TEXTS[1])
    theirs = _reference(ref, ids)  # the same bf16 values, upcast to float32 by transformers
    assert np.abs(model.logits(ids) - theirs.logits[0].numpy()).max() < LOGITS_TOL


def test_memory_is_stated_before_loading_and_a_model_too_big_is_refused(checkpoints, tmp_path):
    from safetensors import safe_open

    folder = _copy(checkpoints, "mistral", tmp_path)
    with safe_open(folder / "model.safetensors", framework="np") as f:  # an independent reader
        want = 4 * sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())
    info = describe(folder)
    assert info["float32_bytes"] == want and info["family"] == "mistral"
    with pytest.raises(ModelMemoryError, match=rf"needs .* \({want:,} bytes, {want // 4:,} parameters in float32\)"
                                               r", over the .* of max_bytes"):
        load(folder, max_bytes=want - 1)
    with pytest.raises(ValueError, match="max_bytes must be a positive int"):
        load(folder, max_bytes="lots")
    assert load(folder, max_bytes=want).float32_bytes == want


def test_an_unsupported_architecture_names_the_field_and_the_supported_ones(checkpoints, tmp_path):
    folder = _copy(checkpoints, "llama", tmp_path)
    _edit_config(folder, model_type="t5", architectures=["T5ForConditionalGeneration"])
    with pytest.raises(ValueError, match=r"model_type='t5' \(architectures=\['T5ForConditionalGeneration'\]\) "
                                         r"is not supported; the supported model_type values are "
                                         r"bert, gpt2, llama, mistral, qwen2"):
        load(folder)
    _edit_config(folder, model_type="llama", hidden_act="gelu")
    with pytest.raises(ValueError, match=r"hidden_act='gelu' is not supported for llama \(supported: 'silu'\)"):
        load(folder)
    with pytest.raises(FileNotFoundError, match="no model folder or .gguf file at"):
        load(tmp_path / "model.gguf")


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "tokenizer.json"])
def test_a_missing_file_is_named(checkpoints, tmp_path, missing):
    folder = _copy(checkpoints, "gpt2", tmp_path)
    (folder / missing).unlink()
    expect = "model.safetensors.index.json" if missing == "model.safetensors" else missing
    with pytest.raises(FileNotFoundError, match=rf"{expect} is missing: a model folder needs"):
        load(folder)


def test_pytorch_pickles_are_not_read(checkpoints, tmp_path):
    folder = _copy(checkpoints, "gpt2", tmp_path)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"holds PyTorch pickles \(pytorch_model\*.bin\), which are not read"):
        load(folder)


def test_a_missing_folder_and_an_unknown_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model folder or .gguf file at"):
        load(tmp_path / "nothing-here")
    with pytest.raises(ValueError, match="unknown model 'gpt-9'"):
        load("gpt-9")


def test_the_first_tensor_that_does_not_match_the_config_is_named(checkpoints, tmp_path):
    folder = _copy(checkpoints, "qwen2", tmp_path)
    _edit_config(folder, num_key_value_heads=3)  # 3 key/value heads of d_k 8: k_proj (24, 48), stored (16, 48)
    with pytest.raises(ValueError, match=r"tensor 'model.layers.0.self_attn.k_proj.weight' has shape \(16, 48\), "
                                         r"but .*config.json implies \(24, 48\)"):
        load(folder)
    _edit_config(folder, num_key_value_heads=2, num_hidden_layers=3)
    with pytest.raises(ValueError, match=r"the checkpoint has no tensor 'model.layers.2.input_layernorm.weight'"):
        load(folder)


def test_mha_models_lists_the_folders_with_a_config(checkpoints, tmp_path, monkeypatch):
    from mha_core.models import model_folders

    root = tmp_path / "models"
    for kind in ("bert", "llama"):
        shutil.copytree(checkpoints[kind][0], root / f"my-{kind}")
    (root / "notes").mkdir()  # no config.json: not a model
    (root / "tiny.gguf").write_bytes(b"")  # listed by name, read when chosen
    shutil.copytree(checkpoints["gpt2"][0], root / "my-t5")
    _edit_config(root / "my-t5", model_type="t5", architectures=[])
    monkeypatch.setenv("MHA_MODELS", str(root))
    assert model_folders() == {
        str(root.resolve() / "my-bert"): "my-bert (your bert model: reads a whole sentence)",
        str(root.resolve() / "my-llama"): "my-llama (your llama model: writes text)",
        str(root.resolve() / "my-t5"): "my-t5 (your model: not a supported architecture)",
        str(root.resolve() / "tiny.gguf"): "tiny (your GGUF model: writes text)",
    }
    assert model_folders(root / "my-llama") == {str(root.resolve() / "my-llama"): "my-llama (your llama model: writes text)"}
    monkeypatch.delenv("MHA_MODELS")
    assert model_folders() == {}


def test_the_real_heads_panel_shows_a_model_of_your_own(checkpoints, monkeypatch):
    """The picker's entry, the maps, find-a-head, the overview, the induction demo and the write
    mode, on a decoder of your own (the panel reads ``MODELS`` when it draws)."""
    from mha_core.ui import real_heads_panel as R

    folders = {str(checkpoints[k][0].resolve()): f"tiny {k}" for k in ("llama", "bert")}
    monkeypatch.setattr(R, "MODELS", {**R.MODELS, **folders})
    llama, bert = folders
    panel = R.RealHeadsPanel(model=llama, start=None)
    assert panel.status.value == "" and ("tiny llama", llama) in panel.model.options
    assert "<b>llama</b>, your own parameters, not quantised" in panel.label.value
    assert " of 2" in panel.label.value and "<b>head 0</b> of 6" in panel.label.value
    assert "GQA" in panel.label.value and (panel.overview.layers, panel.overview.heads) == (2, 6)
    # find-a-head on a tiny random model: a pattern some head shows clearly opens that head; one that
    # no head shows clearly (best score under CLEAR_SCORE), or that this input cannot measure (no
    # "it" and "animal"), is refused with the reason, and nothing moves. (The tiny model's heads are
    # random, and here every pattern is refused; tests/test_real_heads_panel.py opens planted heads.)
    for name in R.PATTERNS:
        before = (panel.layer.value, panel.head.value)
        found = panel.show_pattern(name)
        if found is None:
            why = panel.status.value
            assert "mha-error" in why and ("clearly from" in why or "needs the words" in why), (name, why)
            assert (panel.layer.value, panel.head.value) == before
            continue
        layer, head, score = found
        assert score >= R.CLEAR_SCORE and (panel.layer.value, panel.head.value) == (layer, head)
        assert f"{name} {score:.2f}" in panel.about.value and f"{name} score" in panel.overview.title
    best = panel.induction_demo()  # on the chosen decoder, not on SmolLM2
    assert best is not None and panel.model.value == llama and "induction demo" in panel.label.value
    assert "Write: watch llama add tokens" in panel.writer.heading.value
    assert panel.writer.write() and len(panel.writer.steps) == panel.writer.length.value
    assert "float32" in panel.writer.caption.value
    panel.model.value = bert  # an encoder: the maps are its own, the write mode keeps the last decoder
    assert panel.status.value == "" and "<b>bert</b>" in panel.label.value
    assert panel.writer.model_name == llama


def test_about_states_the_size_before_loading(checkpoints, capsys):
    from mha_core.models.__main__ import main

    folder = checkpoints["gpt2"][0]
    assert main(["about", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"gpt2, {describe(folder)['parameters']:,} parameters" in out and ": fits" in out
    assert main(["about", str(folder / "nope")]) == 1
    assert "config.json is missing" in capsys.readouterr().err


@pytest.fixture(scope="module")
def gguf_llama(tmp_path_factory):
    """A Llama GGUF file (Q8_0 feed-forward) and transformers' model read from it (eager, float32)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    root = tmp_path_factory.mktemp("gguf")
    # d_model 64, d_ff 128: rows that Q8_0's blocks of 32 divide
    ref = write_checkpoint("llama", root / "hf", hidden_size=64, num_attention_heads=8, intermediate_size=128)
    path = write_gguf(ref, train_tokenizer("llama"), root / "tiny-llama.Q8_0.gguf")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(root, gguf_file=path.name, attn_implementation="eager",
                                                               dtype=torch.float32).eval()
    return path, theirs, ref


def test_a_gguf_file_matches_transformers_reading_it(gguf_llama):
    path, theirs, fp32 = gguf_llama
    model = load(path)
    assert model.quantised and "quantised weights: Q8_0" in model.label and model.name == str(path.resolve())
    assert not model.arrays["layer0.W_V"].flags.writeable  # an F32 tensor: a view of the file's memory map
    worst = {"attention": 0.0, "logits": 0.0}
    for ids in _sequences(model):
        ours, ref = model.forward(ids), _reference(theirs, ids)
        for layer, w in enumerate(ref.attentions):
            err = float(np.abs(ours.attention[layer] - w[0].numpy()).max())
            assert err < ATTENTION_TOL, f"GGUF: attention of layer {layer} off by {err:.2e} (N={ids.size})"
            worst["attention"] = max(worst["attention"], err)
        err = float(np.abs(ours.logits - ref.logits[0].numpy()).max())
        assert err < LOGITS_TOL, f"GGUF: logits off by {err:.2e} (N={ids.size})"
        worst["logits"] = max(worst["logits"], err)
    # the quantisation is real: the float32 model the file was made from gives other logits
    ids = model.encode(TEXTS[0])
    assert np.abs(model.logits(ids) - _reference(fp32, ids).logits[0].numpy()).max() > 10 * LOGITS_TOL
    assert [s.id for s in model.write(ids[:5], 6)] == [s.id for s in model.write(ids[:5], 6, use_cache=False)]
    print(f"\nGGUF (Q8_0) vs transformers from the same file, max abs diff: attention {worst['attention']:.1e}, "
          f"logits {worst['logits']:.1e}")


def test_a_gguf_file_is_refused_when_too_big_or_of_another_architecture(gguf_llama, tmp_path):
    from gguf import GGUFWriter

    with pytest.raises(ModelMemoryError, match=r"tiny-llama.Q8_0.gguf needs .* parameters in float32\), over"):
        load(gguf_llama[0], max_bytes=1_000)
    other = tmp_path / "other.gguf"
    w = GGUFWriter(str(other), "gpt2")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match=r"general.architecture='gpt2' is not supported in a GGUF file; "
                                         r"supported: llama"):
        load(other)
