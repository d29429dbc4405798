"""Tiny random checkpoints of every supported family, written by ``transformers`` itself.

``write_checkpoint(kind, folder)`` builds a random model of ``kind`` from a small config
(``BertConfig``, ``GPT2Config``, ``LlamaConfig``, ``MistralConfig``, ``Qwen2Config``),
``save_pretrained``s it into ``folder`` as safetensors, with a ``tokenizer.json`` trained by
``tokenizers`` on a few sentences (WordPiece for BERT, byte-level BPE for the decoders), and
returns the model (eager attention, float32) as the reference. Test-only: needs torch and
transformers.

The weights are drawn wider than transformers' initialisation (std 0.02 makes every head nearly
uniform, which would hide a wrong mask or a wrong RoPE layout): matrices with std 0.3, norm
weights near 1, biases with std 0.1.
"""

from __future__ import annotations

from pathlib import Path

TEXTS = [
    "The animal didn't cross the street because it was too tired.",
    "The capital of France is Paris, and the capital of Italy is Rome.",
    "Attention lets every token look at every other token in the sentence.",
    "A head puts its weight on a few keys; the weights of each row sum to one.",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "Crème brûlée, naïve façade, 東京, and 1,234,567 tokens.",
]
VOCAB = 320  # the tokenizers' size; the models' vocab_size is a little larger (padding rows)
KINDS = ("bert", "gpt2", "llama", "mistral", "qwen2")


def train_tokenizer(kind: str):
    """A small `tokenizers` tokenizer: BERT's WordPiece with [CLS] ... [SEP], or GPT-2's byte-level BPE."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    if kind == "bert":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok.train_from_iterator(TEXTS, trainers.WordPieceTrainer(vocab_size=VOCAB, special_tokens=specials))
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[(t, tok.token_to_id(t)) for t in ("[CLS]", "[SEP]")])
        return tok
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def config_of(kind: str, vocab: int, **overrides):
    """A small config of ``kind``: 2 layers; GQA (6 query heads, 2 key/value heads) for the Llama
    family; ``overrides`` replace any of its arguments."""
    import transformers

    llama = dict(vocab_size=vocab, num_hidden_layers=2, hidden_size=48, intermediate_size=96, num_attention_heads=6,
                 num_key_value_heads=2, max_position_embeddings=128, rope_theta=10_000.0, eos_token_id=0)
    kinds = {
        "bert": (transformers.BertConfig, dict(vocab_size=vocab, num_hidden_layers=2, hidden_size=32,
                                               num_attention_heads=4, intermediate_size=64,
                                               max_position_embeddings=64)),
        "gpt2": (transformers.GPT2Config, dict(vocab_size=vocab, n_layer=2, n_embd=32, n_head=4, n_positions=64,
                                               eos_token_id=0, bos_token_id=0)),
        "llama": (transformers.LlamaConfig, dict(llama, tie_word_embeddings=False)),
        "mistral": (transformers.MistralConfig, dict(llama, tie_word_embeddings=True, sliding_window=4096)),
        "qwen2": (transformers.Qwen2Config, dict(llama, tie_word_embeddings=False)),
    }
    cls, kwargs = kinds[kind]
    return cls(**{**kwargs, **overrides})


def write_checkpoint(kind: str, folder: Path, seed: int = 0, dtype=None, max_shard_size=None, **overrides):
    """Save a random ``kind`` model and its tokenizer into ``folder``; return the reference model
    (reloaded from ``folder``, eager attention, float32)."""
    import torch
    import transformers

    tok = train_tokenizer(kind)
    config = config_of(kind, tok.get_vocab_size() + 8, **overrides)
    cls = {"bert": transformers.BertModel, "gpt2": transformers.GPT2LMHeadModel}.get(
        kind, transformers.AutoModelForCausalLM)
    torch.manual_seed(seed)
    model = cls.from_config(config) if cls is transformers.AutoModelForCausalLM else cls(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim > 1:
                p.copy_(torch.randn_like(p) * 0.3)
            elif name.endswith("weight"):  # a norm's scale
                p.copy_(1 + torch.randn_like(p) * 0.1)
            else:
                p.copy_(torch.randn_like(p) * 0.1)
    folder.mkdir(parents=True, exist_ok=True)
    saved = model if dtype is None else model.to(dtype)
    extra = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    saved.save_pretrained(folder, **extra)
    tok.save(str(folder / "tokenizer.json"))
    return cls.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def _permute(w, n_head: int):
    """llama.cpp's reordering of W_Q / W_K rows for a GGUF file: rotate_half's pairs side by side."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, tok, path: Path, quantise=("ffn_gate", "ffn_up", "ffn_down")) -> Path:
    """Write the transformers Llama ``model`` and its tokenizer ``tok`` as a GGUF file, the way
    llama.cpp lays one out (``general.architecture = "llama"``, W_Q and W_K permuted, a byte-level
    BPE tokenizer); the tensors whose names contain one of ``quantise`` are stored as Q8_0."""
    import json

    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter, TokenType
    from gguf.quants import quantize

    c = model.config
    w = GGUFWriter(str(path), "llama")
    w.add_name(path.stem)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    vocab = {i: t for t, i in tok.get_vocab().items()}
    tokens = [vocab.get(i, f"<pad{i}>") for i in range(c.vocab_size)]  # the embedding's padding rows too
    specials = {"<|endoftext|>"} | {t for t in tokens if t.startswith("<pad")}
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([TokenType.CONTROL if t in specials else TokenType.NORMAL for t in tokens])
    merges = json.loads(tok.to_str())["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    h, n_kv = c.num_attention_heads, c.num_key_value_heads
    names = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    if not c.tie_word_embeddings:
        names["output.weight"] = sd["lm_head.weight"]
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        names |= {f"blk.{i}.attn_norm.weight": sd[p + "input_layernorm.weight"],
                  f"blk.{i}.attn_q.weight": _permute(sd[p + "self_attn.q_proj.weight"], h),
                  f"blk.{i}.attn_k.weight": _permute(sd[p + "self_attn.k_proj.weight"], n_kv),
                  f"blk.{i}.attn_v.weight": sd[p + "self_attn.v_proj.weight"],
                  f"blk.{i}.attn_output.weight": sd[p + "self_attn.o_proj.weight"],
                  f"blk.{i}.ffn_norm.weight": sd[p + "post_attention_layernorm.weight"],
                  f"blk.{i}.ffn_gate.weight": sd[p + "mlp.gate_proj.weight"],
                  f"blk.{i}.ffn_up.weight": sd[p + "mlp.up_proj.weight"],
                  f"blk.{i}.ffn_down.weight": sd[p + "mlp.down_proj.weight"]}
    for name, a in names.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        if any(q in name for q in quantise):
            w.add_tensor(name, quantize(a, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
