"""A GGUF file of the Llama architecture (Llama, Mistral, SmolLM2 as llama.cpp writes them), read
with the ``gguf`` package's numpy reader: a memory map of the file, quantised tensors
dequantised to float32 once.

    read_llama(path)          -> our config, arrays in the core's layout, a `tokenizers` tokenizer
    read_gguf(path, max_bytes) -> a ``llama.Llama`` (``load(path)`` for a ``.gguf`` path)

GGUF stores ``W_Q`` and ``W_K`` with their columns permuted so that RoPE turns *adjacent*
pairs, which is what ``mha_core.core.rope.apply_rope`` does; that layout is kept as it is.
Only ``general.architecture == "llama"`` with a byte-level BPE tokenizer (``tokenizer.ggml.model
== "gpt2"``) is read; anything else is refused naming the field.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .checkpoint import check_memory

# GGUF tensor name (inside "blk.{i}.") -> our name; matrices are transposed to (in, out).
_LAYER_NAMES = {
    "attn_q.weight": "W_Q", "attn_k.weight": "W_K", "attn_v.weight": "W_V", "attn_output.weight": "W_O",
    "attn_norm.weight": "attn_norm", "ffn_norm.weight": "ffn_norm",
    "ffn_gate.weight": "W_gate", "ffn_up.weight": "W_up", "ffn_down.weight": "W_down",
}
_CONFIG_KEYS = {  # GGUF metadata key -> our config key
    "llama.block_count": "n_layers", "llama.embedding_length": "d_model",
    "llama.feed_forward_length": "d_ff", "llama.attention.head_count": "n_heads",
    "llama.attention.head_count_kv": "n_kv_heads", "llama.rope.freq_base": "rope_base",
    "llama.attention.layer_norm_rms_epsilon": "eps", "llama.context_length": "context_length",
}
TOKEN_TYPE_CONTROL = 3  # llama.cpp's token type for special tokens such as <|im_start|>


ARCHITECTURES = ("llama",)  # general.architecture values read here


def _open(path: Path):
    from gguf import GGUFReader

    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: load() takes a .gguf file or a model folder")
    reader = GGUFReader(path)
    fields = {k: f.contents() for k, f in reader.fields.items()}
    arch = fields.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"{path}: general.architecture={arch!r} is not supported in a GGUF file; "
                         f"supported: {', '.join(ARCHITECTURES)} (or give a Hugging Face folder)")
    return reader, fields


def read_llama(path) -> tuple[dict, dict[str, np.ndarray], object]:
    """Our config, the arrays (float32, in the core's layout) and the tokenizer of a Llama GGUF."""
    from gguf.quants import dequantize

    reader, fields = _open(Path(path))
    tensors = {t.name: t for t in reader.tensors}
    config = {ours: fields[key] for key, ours in _CONFIG_KEYS.items()}

    def weight(name: str) -> np.ndarray:
        if name not in tensors:
            raise ValueError(f"{path}: the GGUF file has no tensor {name!r}, which its metadata implies")
        t = tensors[name]
        w = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)  # (out, in): ggml's ne reversed
        return w.T if w.ndim == 2 else w  # (in, out), so that y = x @ W; an F32 tensor stays a memory map

    arrays = {"tok_embed": weight("token_embd.weight").T,  # (vocab, d_model): embedding rows
              "out_norm": weight("output_norm.weight")}
    if "output.weight" in tensors:  # an untied output head (SmolLM2 ties them)
        arrays["lm_head"] = weight("output.weight")  # (d_model, vocab)
    for i in range(config["n_layers"]):
        for theirs, ours in _LAYER_NAMES.items():
            arrays[f"layer{i}.{ours}"] = weight(f"blk.{i}.{theirs}")
    config.update(vocab_size=len(fields["tokenizer.ggml.tokens"]),
                  quantisation=sorted({t.tensor_type.name for t in reader.tensors}),
                  name=fields.get("general.name"))
    return config, arrays, tokenizer_from_gguf(fields)


def read_gguf(path, max_bytes=None):
    """The Llama of a GGUF file, its float32 size checked first (as ``checkpoint.read_folder``)."""
    from .llama import Llama

    path = Path(path).expanduser().resolve()
    reader, fields = _open(path)
    need = 4 * sum(int(t.n_elements) for t in reader.tensors)
    check_memory(path, need, max_bytes)
    config, arrays, tok = read_llama(path)
    config["max_tokens"] = config["context_length"]
    model = Llama(tok, arrays, config)
    quantised = [q for q in config["quantisation"] if q not in ("F32", "F16", "BF16")]
    model.name, model.float32_bytes, model.quantised = str(path), need, bool(quantised)
    gqa = f", GQA {model.n_heads}/{model.n_kv_heads} heads" if model.n_kv_heads < model.n_heads else ""
    weights = f"quantised weights: {', '.join(quantised)}" if quantised else "float weights"
    model.label = f"{path.stem} (llama decoder{gqa}, {need // 4:,} parameters, {weights})"
    return model


def tokenizer_from_gguf(fields: dict):
    """A `tokenizers` byte-level BPE built from a GGUF's ``tokenizer.ggml.*`` metadata.

    ``tokenizer.ggml.pre == "smollm"`` is llama.cpp's name for SmolLM's pre-tokenizer: digits
    split one by one, then GPT-2's byte-level split (no prefix space).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if fields.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"expected a byte-level BPE ('gpt2') tokenizer, got {fields.get('tokenizer.ggml.model')!r}")
    tokens = list(fields["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    splits = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if fields.get("tokenizer.ggml.pre") == "smollm":
        splits.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(splits)
    tok.decoder = decoders.ByteLevel()
    types = fields["tokenizer.ggml.token_type"]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types, strict=True) if kind == TOKEN_TYPE_CONTROL])
    if fields.get("tokenizer.ggml.add_bos_token"):
        from tokenizers import processors

        bos = tokens[fields["tokenizer.ggml.bos_token_id"]]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, fields["tokenizer.ggml.bos_token_id"])])
    return tok


