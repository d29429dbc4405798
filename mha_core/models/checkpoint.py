"""A model folder in the Hugging Face layout, read with no network and nothing written.

    folder/
        config.json          ``model_type`` (else ``architectures``) names the family
        model.safetensors    or model-00001-of-0000N.safetensors + model.safetensors.index.json
        tokenizer.json       the `tokenizers` file the text goes through

``read_folder(path, max_bytes)`` reads the config and picks the family; reads every tensor's
header (name, dtype, shape; no data); states the model's size in float32 and refuses one over
the limit (the memory available, or ``max_bytes``); then maps the checkpoint's tensors onto the
core's parameters. A float32 tensor stays a read-only memory map of the file (shared by every
process that opens it); a float16, bfloat16 or float64 one is converted once, into memory.

The header is read here rather than through the ``safetensors`` library (a dependency for
MiniLM's conversion): its numpy API (``safe_open(..., framework="np").get_tensor``) returns a
private, writable copy of each tensor, and numpy has no bfloat16. The format is simple: an
8-byte little-endian header length, a JSON header (``name -> dtype, shape, data_offsets``),
then the raw little-endian data, which ``np.memmap`` maps as it is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import bert, gpt2, llama
from .model import ModelMemoryError

CONFIG, WEIGHTS, INDEX, TOKENIZER = "config.json", "model.safetensors", "model.safetensors.index.json", "tokenizer.json"
# model_type -> (family module, its model class, what the tensors' names start with, Q/K/V biases)
FAMILIES = {
    "bert": (bert, bert.Bert, ("bert.", "")),
    "gpt2": (gpt2, gpt2.GPT2, ("transformer.", "")),
    "llama": (llama, llama.Llama, ("model.", "")),
    "mistral": (llama, llama.Llama, ("model.", "")),
    "qwen2": (llama, llama.Llama, ("model.", "")),
}
ARCHITECTURES = {"BertModel": "bert", "BertForMaskedLM": "bert", "GPT2Model": "gpt2", "GPT2LMHeadModel": "gpt2",
                 "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2"}
QKV_BIASES = {"qwen2"}  # Qwen2's Q, K and V projections have biases, its output projection none
ENCODERS = {"bert"}  # the other families are decoders
MODELS_ENV = "MHA_MODELS"  # a folder of model folders, for the dashboard's picker (``model_folders``)
DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": np.uint16}  # BF16: raw bits


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor's bytes are: the file, dtype, shape and first byte."""

    file: Path
    dtype: str
    shape: tuple[int, ...]
    offset: int


def _need(path: Path, what: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: a model folder needs {what} (the Hugging Face layout: "
                                f"{CONFIG}, {WEIGHTS} or a sharded set with {INDEX}, {TOKENIZER})")
    return path


def read_config(folder: Path) -> tuple[str, dict]:
    """The family's name (a key of ``FAMILIES``) and the config of ``folder/config.json``."""
    path = _need(folder / CONFIG, "its config")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} is not readable JSON ({err})") from None
    kind = config.get("model_type")
    archs = config.get("architectures") or []
    if kind not in FAMILIES:
        kind = next((ARCHITECTURES[a] for a in archs if a in ARCHITECTURES), kind)
    if kind not in FAMILIES:
        raise ValueError(f"{path}: model_type={config.get('model_type')!r} (architectures={archs!r}) is not "
                         f"supported; the supported model_type values are {', '.join(FAMILIES)}")
    for field, allowed in FAMILIES[kind][0].REQUIRES.items():
        if config.get(field, allowed[0]) not in allowed:
            raise ValueError(f"{path}: {field}={config[field]!r} is not supported for {kind} "
                             f"(supported: {', '.join(map(repr, allowed))})")
    return kind, config


def read_headers(folder: Path) -> dict[str, TensorInfo]:
    """Every tensor of the checkpoint (one file, or the shards its index lists): header only."""
    if (folder / WEIGHTS).is_file():
        files = [folder / WEIGHTS]
    elif not (folder / INDEX).is_file() and any(folder.glob("pytorch_model*.bin")):
        raise ValueError(f"{folder} holds PyTorch pickles (pytorch_model*.bin), which are not read (a pickle can "
                         f"run code); save the model as safetensors: model.save_pretrained(folder), the default")
    else:
        index = _need(folder / INDEX, f"its weights ({WEIGHTS})")
        try:
            files = [folder / f for f in dict.fromkeys(json.loads(index.read_text())["weight_map"].values())]
        except (OSError, ValueError, KeyError, AttributeError) as err:
            raise ValueError(f"{index} is not a safetensors index with a weight_map ({err})") from None
    tensors = {}
    for path in files:
        with open(_need(path, "every shard its index lists"), "rb") as f:
            try:
                n = int(np.frombuffer(f.read(8), dtype="<u8")[0])
                header = json.loads(f.read(n))
            except (ValueError, IndexError) as err:
                raise ValueError(f"{path} is not a safetensors file ({err})") from None
        for name, info in header.items():
            if name != "__metadata__":
                tensors[name] = TensorInfo(path, info["dtype"], tuple(info["shape"]), 8 + n + info["data_offsets"][0])
    return tensors


def float32_bytes(tensors: dict[str, TensorInfo]) -> int:
    """The checkpoint's size once every tensor is float32: 4 bytes a parameter."""
    return 4 * sum(int(np.prod(t.shape)) for t in tensors.values())


def available_bytes() -> int:
    """The memory the system can give without swapping (``MemAvailable``; else all physical memory)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(folder: Path, need: int, max_bytes) -> None:
    """Refuse, with the number, a model whose float32 size is over ``max_bytes`` (default: the
    memory available now)."""
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1):
        raise ValueError(f"max_bytes must be a positive int (bytes) or None, got {max_bytes!r}")
    limit, what = (available_bytes(), "memory available now") if max_bytes is None else (max_bytes, "max_bytes")
    if need > limit:
        raise ModelMemoryError(f"{folder} needs {_size(need)} ({need:,} bytes, {need // 4:,} parameters "
                               f"in float32), over the {_size(limit)} of {what}; pass max_bytes= to "
                               f"load() to allow more")


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _array(info: TensorInfo, name: str) -> np.ndarray:
    """One tensor as float32: a read-only memory map if stored as float32, else converted once."""
    if info.dtype not in DTYPES:
        raise ValueError(f"{info.file}: tensor {name!r} has dtype {info.dtype}; supported: {', '.join(DTYPES)}")
    raw = np.memmap(info.file, dtype=np.dtype(DTYPES[info.dtype]).newbyteorder("<"), mode="r",
                    offset=info.offset, shape=info.shape).view(np.ndarray)
    if info.dtype == "F32":
        return raw
    if info.dtype == "BF16":  # the top half of a float32: shift the bits into place
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


def tensor_reader(tensors: dict[str, TensorInfo], prefixes: tuple[str, ...], config_path: Path):
    """``tensor(name, shape)`` for a family's ``from_checkpoint``: the named tensor (under the
    first of ``prefixes`` the checkpoint uses) as float32, or an error naming it and the config."""
    prefix = next((p for p in prefixes if any(k.startswith(p) for k in tensors)), "")

    def tensor(name: str, shape: tuple[int, ...]) -> np.ndarray:
        full = name if name == "lm_head.weight" else prefix + name  # the untied output head has no prefix
        info = tensors.get(full)
        if info is None:
            raise ValueError(f"the checkpoint has no tensor {full!r}, which {config_path} implies")
        if info.shape != tuple(shape):
            raise ValueError(f"tensor {full!r} has shape {info.shape}, but {config_path} implies {tuple(shape)}")
        return _array(info, full)

    return tensor


def read_tokenizer(path: Path):
    """The `tokenizers` file at ``path``, with padding and truncation off (one sentence at a time)."""
    from tokenizers import Tokenizer

    _need(path, "its tokenizer")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises its own Exception type
        raise ValueError(f"{path} is not a readable tokenizers file ({err})") from None
    tok.no_padding()
    tok.no_truncation()
    return tok


def describe(path) -> dict:
    """What ``read_folder`` would load, from the config and the headers alone: the family, the
    size in layers and heads, and the float32 bytes."""
    folder = Path(path).expanduser()
    kind, config = read_config(folder)
    tensors = read_headers(folder)
    need = float32_bytes(tensors)
    return {"family": kind, "float32_bytes": need, "parameters": need // 4, "config": config}


def model_folders(root=None) -> dict[str, str]:
    """The models a user brought: each subfolder of ``root`` (default ``$MHA_MODELS``; none if
    unset) that holds a ``config.json`` and each ``.gguf`` file in it, or ``root`` itself if it
    is one, as ``{absolute path: title}``. Only the configs are read; a folder whose architecture is not supported is listed
    too, and says why when it is opened."""
    root = root if root is not None else os.environ.get(MODELS_ENV)
    if not root:
        return {}
    root = Path(root).expanduser().resolve()
    if root.suffix == ".gguf" and root.is_file():
        return {str(root): f"{root.stem} (your GGUF model: writes text)"}
    folders = [root] if (root / CONFIG).is_file() else sorted(
        p for p in root.iterdir() if (p / CONFIG).is_file() or p.suffix == ".gguf") if root.is_dir() else []
    found = {}
    for folder in folders:
        if folder.suffix == ".gguf" and folder.is_file():  # read when chosen (gguf_file.read_gguf)
            found[str(folder)] = f"{folder.stem} (your GGUF model: writes text)"
            continue
        try:
            kind, _ = read_config(folder)
        except ValueError:
            found[str(folder)] = f"{folder.name} (your model: not a supported architecture)"
            continue
        does = "reads a whole sentence" if kind in ENCODERS else "writes text"
        found[str(folder)] = f"{folder.name} (your {kind} model: {does})"
    return found


def read_folder(path, max_bytes=None):
    """The model in ``path``: an instance of its family's class, its weights memory-mapped.

    Raises FileNotFoundError naming a missing file, ValueError naming an unsupported architecture
    (and the config field read) or the first tensor that does not match the config, and
    ``ModelMemoryError`` (with the size) for a model over ``max_bytes`` or the memory available.
    """
    folder = Path(path).expanduser().resolve()
    kind, config = read_config(folder)
    _need(folder / TOKENIZER, "its tokenizer")  # every file is there before anything is read
    tensors = read_headers(folder)
    need = float32_bytes(tensors)
    check_memory(folder, need, max_bytes)
    module, cls, prefixes = FAMILIES[kind]
    tensor = tensor_reader(tensors, prefixes, folder / CONFIG)
    extra = {"biases": True} if kind in QKV_BIASES else {}
    ours, arrays = module.from_checkpoint(config, tensor, **extra)
    tokenizer = read_tokenizer(folder / TOKENIZER)
    if tokenizer.get_vocab_size() > ours["vocab_size"]:
        raise ValueError(f"{folder / TOKENIZER} has {tokenizer.get_vocab_size():,} tokens, more than the "
                         f"model's vocab_size={ours['vocab_size']:,}")
    model = cls(tokenizer, arrays, ours)
    model.name = str(folder)
    model.float32_bytes = need
    kind_of = "encoder" if not model.causal else "decoder"
    gqa = f", GQA {model.n_heads}/{model.n_kv_heads} heads" if model.n_kv_heads < model.n_heads else ""
    model.label = f"{folder.name} ({kind} {kind_of}{gqa}, {need // 4:,} parameters, float32 weights)"
    return model
