"""The one store of the models trained here: ``NAME.safetensors`` (the weights) beside ``NAME.json`` (the record).

    save("multitask_t5", {"seed0.": model, ...}, record, out, half=True)   one file for every model
    save_record("minilm_heads", record, out)                               a record alone, no weights
    read_record("multitask_t5")                                           config, command, losses, ...
    tensors = read_weights("multitask_t5")                                every tensor, float32
    load_into(new_model(), tensors, prefix="seed0.")                       one model's weights, checked
    load_runs("hybrid", build, LlamaConfig, runs=["hybrid/0"])             "variant/seed" runs, built and loaded

The files live in the package's folder ``attn_edu/weights/`` (or any folder given). One file holds several
models, each under its own prefix (a seed, a variant). safetensors refuses two names for one tensor, so a model
with **tied embeddings** (its config's ``tie_embeddings``: the output matrix *is* the token embedding) is stored
without ``lm_head.weight``, and loading ties it again: that key, and only then, may be missing from the file.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import nn

SUFFIXES = (".safetensors", ".json")  # the weights, the record
TIED_KEY = "lm_head.weight"  # left out of the file when the config ties it to the token embedding


def weights_folder() -> Path:
    """The package's folder of trained weights, ``attn_edu/weights/``."""
    return Path(str(resources.files("attn_edu") / "weights"))


def paths(name: str, directory: str | Path | None = None) -> tuple[Path, Path]:
    """``NAME.safetensors`` and ``NAME.json`` in ``directory`` (default: :func:`weights_folder`)."""
    folder = weights_folder() if directory is None else Path(directory)
    weights, record = (folder / f"{name}{suffix}" for suffix in SUFFIXES)
    return weights, record


def tied(model: nn.Module) -> bool:
    """Whether ``model``'s output head is its token embedding (``config.tie_embeddings``)."""
    return bool(getattr(getattr(model, "config", None), "tie_embeddings", False))


def save(
    name: str,
    models: Mapping[str, nn.Module],
    record: dict[str, Any],
    out: str | Path | None = None,
    *,
    half: bool = False,
) -> Path:
    """Write every model's weights into ``NAME.safetensors`` and ``record`` into ``NAME.json``; return the first.

    ``models`` maps a key prefix (``""`` for a file of one model, ``"seed0."``, ``"seed0.YaRN."``) to a model;
    its tensors are stored as ``prefix + name``, in float16 when ``half``, without ``lm_head.weight`` when the
    model is :func:`tied`.
    """
    from safetensors.torch import save_file

    weights_path, record_path = paths(name, out)
    weights_path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {
        f"{prefix}{key}": (tensor.detach().half() if half else tensor.detach()).contiguous()
        for prefix, model in models.items()
        for key, tensor in model.state_dict().items()
        if not (key == TIED_KEY and tied(model))
    }
    save_file(tensors, str(weights_path))
    save_record(name, record, out)
    return weights_path


def environment(threads: int) -> dict[str, Any]:
    """What a record says it was computed with: Python's and torch's versions and torch's thread count.

    Example:
        >>> sorted(environment(1))
        ['python', 'threads', 'torch']
    """
    return {"python": platform.python_version(), "torch": torch.__version__, "threads": threads}


def save_record(name: str, record: dict[str, Any], out: str | Path | None = None) -> Path:
    """Write ``record`` alone into ``NAME.json`` and return its path: the store of an experiment that ships
    measurements, or a run whose weights are too big to ship, but no weights."""
    _, record_path = paths(name, out)
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return record_path


def read_record(name: str, directory: str | Path | None = None) -> dict[str, Any]:
    """The contents of ``NAME.json``."""
    return json.loads(paths(name, directory)[1].read_text(encoding="utf-8"))


def read_weights(name: str, directory: str | Path | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of ``NAME.safetensors``, in float32, by its stored key."""
    from safetensors.torch import load_file

    return {key: tensor.float() for key, tensor in load_file(str(paths(name, directory)[0])).items()}


def load_into(model: nn.Module, tensors: Mapping[str, torch.Tensor], prefix: str = "") -> nn.Module:
    """Load the tensors stored under ``prefix`` into ``model`` and return it in ``eval()`` mode.

    Every weight of the model must be there, but for ``lm_head.weight`` of a :func:`tied` model; every tensor
    under the prefix must be one of the model's. Anything else is a ``ValueError`` that names the keys.

    Example:
        >>> from attn_edu.models import GPT, GPTConfig
        >>> model = GPT(GPTConfig(vocab_size=5, max_seq_len=4, embed_dim=8, num_heads=2, ffn_dim=16))
        >>> stored = {"m." + k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
        >>> load_into(GPT(model.config), stored, "m.").lm_head.weight.equal(model.lm_head.weight)
        True
    """
    state = {key[len(prefix) :]: tensor for key, tensor in tensors.items() if key.startswith(prefix)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [key for key in missing if not (key == TIED_KEY and tied(model))]
    if missing or unexpected:
        where = f"the weights under {prefix!r}" if prefix else "the weights"
        raise ValueError(
            f"directory: {where} do not fit the {type(model).__name__}: missing {missing}, unexpected {unexpected}"
        )
    return model.eval()


def load_runs(
    name: str,
    build: Callable[[str, Any], nn.Module],
    config_type: Callable[..., Any],
    directory: str | Path | None = None,
    runs: Sequence[str] | None = None,
) -> dict[tuple[str, int], nn.Module]:
    """The shipped runs of an experiment whose record lists them as ``"variant/seed"`` under ``"shipped"`` (or
    only those of ``runs``): ``{(variant, seed): model}``, each built by ``build(variant, config_type(**config))``
    from the record's config, loaded (:func:`load_into`) and in ``eval()`` mode.
    """
    record = read_record(name, directory)
    config = config_type(**record["config"])
    tensors = read_weights(name, directory)
    models = {}
    for key in record["shipped"] if runs is None else runs:
        if key not in record["shipped"]:
            raise ValueError(f"runs: {key!r} is not among the shipped runs {record['shipped']}")
        variant, seed = key.rsplit("/", 1)
        models[variant, int(seed)] = load_into(build(variant, config), tensors, prefix=f"{key}.")
    return models
