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
    """A small config of ``kind``: 2 layers; GQA (6 query heads, 2 key/value heads) for the Llama family."""
    import transformers

    common = dict(vocab_size=vocab, num_hidden_layers=2)
    llama = dict(common, hidden_size=48, intermediate_size=96, num_attention_heads=6, num_key_value_heads=2,
                 max_position_embeddings=128, rope_theta=10_000.0, eos_token_id=0)
    configs = {
        "bert": lambda: transformers.BertConfig(**common, hidden_size=32, num_attention_heads=4,
                                                intermediate_size=64, max_position_embeddings=64),
        "gpt2": lambda: transformers.GPT2Config(vocab_size=vocab, n_layer=2, n_embd=32, n_head=4, n_positions=64,
                                                eos_token_id=0, bos_token_id=0),
        "llama": lambda: transformers.LlamaConfig(**llama, tie_word_embeddings=False),
        "mistral": lambda: transformers.MistralConfig(**llama, tie_word_embeddings=True, sliding_window=4096),
        "qwen2": lambda: transformers.Qwen2Config(**llama, tie_word_embeddings=False),
    }
    config = configs[kind]()
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


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
