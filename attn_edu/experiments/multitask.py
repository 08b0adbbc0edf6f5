"""One family of tasks, told to a model in two ways: by a prefix (T5) and by examples (GPT-3).

Three toy tasks on short sequences of symbols, ``copy``, ``reverse`` and ``sort``, and two small models:

- **Text to text** (Raffel et al., 2020): one encoder-decoder (:class:`~attn_edu.models.T5`) reads
  ``reverse: 3 1 4 1 5 9 <eos>`` and writes ``9 5 1 4 1 3``. A prefix token names the task; one model,
  one loss and one decoding loop serve all three.
- **In context** (Brown et al., 2020): one decoder (:class:`~attn_edu.models.Llama`) reads solved examples
  ``x <sep> y <eos>`` of one task, then a new ``x <sep>``, and must write its answer. Nothing names the
  task: the model has to infer it from the examples in its context, with no gradient step. With zero
  examples it can only guess which of the three tasks is meant (zero-shot); each example helps
  (few-shot).

Both are trained here from three seeds (``python -m attn_edu.experiments.multitask train --model t5|icl``;
on two CPU cores 25-50 s a seed for the T5, 2-5 minutes for the decoder); the weights ship in
``attn_edu/weights/`` as float16 (``multitask_t5.safetensors``, ``multitask_icl.safetensors``, with a ``.json``
record of the config, the command and the accuracies of the stored weights, in the one store of
:mod:`attn_edu.experiments.shipped`), and :func:`load_models` returns them as float32 models.

Shapes:
    text to text: source ``(B, 1 + n + 1)`` = prefix, symbols, ``<eos>``; decoder input and target
    ``(B, n)``. In context: ids ``(B, 1 + K·(2n + 2))`` = ``<bos>``, then K blocks ``x <sep> y <eos>``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attn_edu._validate import check_positive_int
from attn_edu.data import ToyVocab
from attn_edu.experiments import cli, shipped
from attn_edu.generation import generate, generate_seq2seq
from attn_edu.models import T5, Llama, LlamaConfig, T5Config
from attn_edu.objectives import IGNORE_INDEX
from attn_edu.train import TrainResult, train

TASKS = ("copy", "reverse", "sort")
PREFIXES = tuple(f"{task}:" for task in TASKS)  # the prefix tokens of the text-to-text model
T5_VOCAB = ToyVocab(num_symbols=32, specials=("<pad>", "<bos>", "<sep>", "<eos>", *PREFIXES))
T5_LENGTH = 6  # symbols per input
T5_CONFIG = T5Config(
    vocab_size=T5_VOCAB.size, embed_dim=64, num_layers=2, num_decoder_layers=2, num_heads=4, ffn_dim=128
)
ICL_VOCAB = ToyVocab(num_symbols=16)
ICL_LENGTH = 5  # symbols per example
ICL_EXAMPLES = 4  # x <sep> y <eos> blocks per training sequence: 0 to 3 solved examples before each answer
ICL_CONFIG = LlamaConfig(
    vocab_size=ICL_VOCAB.size, embed_dim=64, num_layers=2, num_heads=4, num_kv_heads=4, ffn_dim=192
)
STEPS = {"t5": 1000, "icl": 2500}  # AdamW steps, 5% warm-up, cosine decay
LR = 3e-3
BATCH_SIZE = {"t5": 128, "icl": 64}
SEEDS = (0, 1, 2)
NAMES = {"t5": "multitask_t5", "icl": "multitask_icl"}  # --model: the files' stem in attn_edu/weights/
EVAL_SEED, EVAL_SIZE = 1234, 768  # the fixed test batch of the record (never drawn in training)


def apply_task(task: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The answers: ``x`` copied, reversed or sorted, as ``task`` (an index into :data:`TASKS`) says, per row.

    Shapes:
        task ``(B,)`` long, x ``(B, n)``; returns ``(B, n)``.

    Example:
        >>> apply_task(torch.tensor([0, 1, 2]), torch.tensor([[3, 1, 2]] * 3)).tolist()
        [[3, 1, 2], [2, 1, 3], [1, 2, 3]]
    """
    if task.ndim != 1 or x.ndim != 2 or task.shape[0] != x.shape[0]:
        raise ValueError(
            f"task, x: expected shapes (B,) and (B, n), got {tuple(task.shape)} and {tuple(x.shape)}"
        )
    if task.numel() and not (0 <= int(task.min()) and int(task.max()) < len(TASKS)):
        raise ValueError(f"task: expected indices 0..{len(TASKS) - 1} into {TASKS}, got {task.tolist()}")
    per_task = torch.stack([x, x.flip(1), x.sort(dim=1).values])  # (3, B, n)
    return per_task[task, torch.arange(x.shape[0])]


def _tasks(batch_size: int, task: str | None, generator: torch.Generator | None) -> torch.Tensor:
    check_positive_int("batch_size", batch_size)
    if task is None:
        return torch.randint(len(TASKS), (batch_size,), generator=generator)
    if task not in TASKS:
        raise ValueError(f"task: expected None or one of {TASKS}, got {task!r}")
    return torch.full((batch_size,), TASKS.index(task))


@dataclass(frozen=True)
class TextToTextBatch:
    """Encoder input ``prefix x <eos>``, decoder input ``<bos> y[:-1]``, target ``y``, and each row's task."""

    source: torch.Tensor  # (B, n + 2)
    decoder_input: torch.Tensor  # (B, n)
    target: torch.Tensor  # (B, n)
    task: torch.Tensor  # (B,) index into TASKS


def text_to_text_inputs(x: torch.Tensor, task: str | torch.Tensor) -> TextToTextBatch:
    """The T5 batch for given symbols ``x`` and one task name, or a task index per row.

    Shapes:
        x ``(B, n)`` symbol numbers ``0 .. 31``; task a name or ``(B,)`` indices into :data:`TASKS`.

    Example:
        >>> b = text_to_text_inputs(torch.tensor([[3, 1, 4, 1, 5, 9]]), "reverse")
        >>> T5_VOCAB.decode(b.source[0]), T5_VOCAB.decode(b.decoder_input[0]), T5_VOCAB.decode(b.target[0])
        ('reverse: 3 1 4 1 5 9 <eos>', '<bos> 9 5 1 4 1', '9 5 1 4 1 3')
    """
    if (
        x.ndim != 2
        or x.dtype != torch.long
        or (x.numel() and not 0 <= int(x.min()) <= int(x.max()) < T5_VOCAB.num_symbols)
    ):
        raise ValueError(
            f"x: expected (B, n) long symbols 0..{T5_VOCAB.num_symbols - 1}, got {x.dtype} {tuple(x.shape)}"
        )
    B = x.shape[0]
    tasks = _tasks(B, task, None) if isinstance(task, str) else task
    target = T5_VOCAB.symbol_id(apply_task(tasks, x))  # (B, n)
    prefix = torch.tensor([T5_VOCAB.special_id(p) for p in PREFIXES])[tasks][:, None]  # (B, 1)
    eos = torch.full((B, 1), T5_VOCAB.special_id("<eos>"))
    source = torch.cat([prefix, T5_VOCAB.symbol_id(x), eos], dim=1)  # (B, n + 2)
    bos = torch.full((B, 1), T5_VOCAB.bos_id)
    return TextToTextBatch(source, torch.cat([bos, target[:, :-1]], dim=1), target, tasks)


def text_to_text_batch(
    generator: torch.Generator | None = None, batch_size: int = 128, *, task: str | None = None
) -> TextToTextBatch:
    """Random inputs, each with a random task (or all with ``task``), as a T5 reads and writes them.

    Example:
        >>> b = text_to_text_batch(torch.Generator().manual_seed(0), 1, task="reverse")
        >>> T5_VOCAB.decode(b.source[0]), T5_VOCAB.decode(b.target[0])
        ('reverse: 12 15 21 0 3 27 <eos>', '27 3 0 21 15 12')
    """
    tasks = _tasks(batch_size, task, generator)
    x = torch.randint(T5_VOCAB.num_symbols, (batch_size, T5_LENGTH), generator=generator)  # (B, n)
    return text_to_text_inputs(x, tasks)


def text_to_text_loss(model: nn.Module, batch: TextToTextBatch) -> torch.Tensor:
    """Cross-entropy of the decoder's predictions of every target token (teacher forcing)."""
    logits = model(batch.source, batch.decoder_input)  # (B, n, V)
    return F.cross_entropy(logits.flatten(0, 1), batch.target.flatten())


def text_to_text_accuracy(model: nn.Module, batch: TextToTextBatch) -> dict[str, float]:
    """Share of whole answers right, per task, when the model writes them alone (greedy decoding)."""
    with torch.no_grad():
        written = generate_seq2seq(model, batch.source, T5_LENGTH, decoder_start_token_id=T5_VOCAB.bos_id)
    right = (written[:, 1:] == batch.target).all(dim=1)  # (B,)
    return {name: right[batch.task == i].float().mean().item() for i, name in enumerate(TASKS)}


@dataclass(frozen=True)
class FewShotBatch:
    """``<bos>`` then ``examples`` blocks ``x <sep> y <eos>`` of one task per row; labels score the ``y``."""

    input_ids: torch.Tensor  # (B, 1 + K (2n + 2))
    labels: torch.Tensor  # (B, 1 + K (2n + 2)): the token at the y positions, IGNORE_INDEX elsewhere
    task: torch.Tensor  # (B,) index into TASKS


def few_shot_batch(
    generator: torch.Generator | None = None,
    batch_size: int = 64,
    *,
    examples: int = ICL_EXAMPLES,
    task: str | None = None,
) -> FewShotBatch:
    """Sequences of solved examples of one task (random per row, or ``task``): nothing names the task.

    Example:
        >>> b = few_shot_batch(torch.Generator().manual_seed(0), 1, examples=2, task="sort")
        >>> ICL_VOCAB.decode(b.input_ids[0])
        '<bos> 12 15 5 0 3 <sep> 0 3 5 12 15 <eos> 11 3 7 9 3 <sep> 3 3 7 9 11 <eos>'
    """
    check_positive_int("examples", examples)
    tasks = _tasks(batch_size, task, generator)
    blocks, labels = (
        [torch.full((batch_size, 1), ICL_VOCAB.bos_id)],
        [torch.full((batch_size, 1), IGNORE_INDEX)],
    )
    sep, eos = (torch.full((batch_size, 1), ICL_VOCAB.special_id(s)) for s in ("<sep>", "<eos>"))
    for _ in range(examples):
        x = torch.randint(ICL_VOCAB.num_symbols, (batch_size, ICL_LENGTH), generator=generator)  # (B, n)
        y = ICL_VOCAB.symbol_id(apply_task(tasks, x))  # (B, n)
        blocks.append(torch.cat([ICL_VOCAB.symbol_id(x), sep, y, eos], dim=1))  # (B, 2n + 2)
        ignored = torch.full((batch_size, ICL_LENGTH + 1), IGNORE_INDEX)
        labels.append(torch.cat([ignored, y, torch.full((batch_size, 1), IGNORE_INDEX)], dim=1))
    return FewShotBatch(torch.cat(blocks, dim=1), torch.cat(labels, dim=1), tasks)


def few_shot_loss(model: nn.Module, batch: FewShotBatch) -> torch.Tensor:
    """Next-token cross-entropy on the answers only, with 0, 1, ... solved examples before each."""
    logits = model(batch.input_ids)  # (B, T, V)
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1), batch.labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX
    )


def answer_start(shots: int) -> int:
    """Index of the first answer token of the block that follows ``shots`` solved examples."""
    return 1 + shots * (2 * ICL_LENGTH + 2) + ICL_LENGTH + 1


def few_shot_accuracy(model: nn.Module, batch: FewShotBatch) -> dict[int, dict[str, float]]:
    """Share of whole answers right, by the number of solved examples before them and by task.

    For ``shots = 0, 1, ...`` the model reads the true sequence up to ``x <sep>`` of block ``shots`` and
    writes ``n`` tokens greedily. Returns ``{shots: {"all": ..., "copy": ..., ...}}``.
    """
    examples = (batch.input_ids.shape[1] - 1) // (2 * ICL_LENGTH + 2)
    result = {}
    for shots in range(examples):
        start = answer_start(shots)
        with torch.no_grad():
            written = generate(model, batch.input_ids[:, :start], ICL_LENGTH)[:, start:]  # (B, n)
        right = (written == batch.input_ids[:, start : start + ICL_LENGTH]).all(dim=1)  # (B,)
        by_task = {name: right[batch.task == i].float().mean().item() for i, name in enumerate(TASKS)}
        result[shots] = {"all": right.float().mean().item()} | by_task
    return result


def new_model(kind: str) -> nn.Module:
    """An untrained model of ``kind`` ``"t5"`` or ``"icl"`` (initialised from torch's global seed)."""
    if kind not in NAMES:
        raise ValueError(f"kind: expected one of {sorted(NAMES)}, got {kind!r}")
    return T5(T5_CONFIG) if kind == "t5" else Llama(ICL_CONFIG)


def train_model(
    kind: str, seed: int, *, steps: int | None = None, progress: bool = False
) -> tuple[nn.Module, TrainResult]:
    """Train one model of ``kind`` from ``seed`` (initial weights and batches), as the shipped ones were."""
    if kind not in NAMES:
        raise ValueError(f"kind: expected one of {sorted(NAMES)}, got {kind!r}")
    torch.manual_seed(seed)  # the initial weights
    model = new_model(kind)
    steps = STEPS[kind] if steps is None else steps
    batches, loss_fn = (
        (text_to_text_batch, text_to_text_loss) if kind == "t5" else (few_shot_batch, few_shot_loss)
    )
    size = BATCH_SIZE[kind]
    run = train(model, lambda g: batches(g, size), steps=steps, lr=LR, seed=seed, progress=progress,
                loss_fn=loss_fn, warmup_steps=max(1, steps // 20), schedule="cosine")  # fmt: skip
    return model, run


def evaluation_batch(kind: str) -> TextToTextBatch | FewShotBatch:
    """The fixed test batch of the record: seed :data:`EVAL_SEED`, :data:`EVAL_SIZE` rows, all tasks."""
    generator = torch.Generator().manual_seed(EVAL_SEED)
    return text_to_text_batch(generator, EVAL_SIZE) if kind == "t5" else few_shot_batch(generator, EVAL_SIZE)


def accuracy(kind: str, model: nn.Module) -> dict:
    """:func:`text_to_text_accuracy` or :func:`few_shot_accuracy` of ``model`` on the fixed test batch."""
    batch = evaluation_batch(kind)
    return text_to_text_accuracy(model, batch) if kind == "t5" else few_shot_accuracy(model, batch)


# --- the stored models ----------------------------------------------------------------------------


def _name(kind: str) -> str:
    """The files' stem of ``kind`` (``"t5"`` or ``"icl"``) in the weights folder."""
    if kind not in NAMES:
        raise ValueError(f"kind: expected one of {sorted(NAMES)}, got {kind!r}")
    return NAMES[kind]


def _half_precision_round_trip(model: nn.Module) -> nn.Module:
    """Round every weight to float16 and back, in place: the model that the shipped file holds."""
    with torch.no_grad():
        for tensor in model.state_dict().values():
            tensor.copy_(tensor.half().float())
    return model


def save_models(kind: str, models: dict[int, nn.Module], record: dict[str, Any], out: str | Path) -> Path:
    """Write every seed's weights (float16, keys ``seed{S}.name``) into one file, and the record beside it."""
    config = T5_CONFIG if kind == "t5" else ICL_CONFIG
    data = {"kind": kind, "config": asdict(config), "seeds": sorted(models)} | record
    by_prefix = {f"seed{seed}.": model for seed, model in models.items()}
    return shipped.save(_name(kind), by_prefix, data, out, half=True)


def read_record(kind: str, directory: str | Path | None = None) -> dict[str, Any]:
    """The ``.json`` record written beside the weights: config, command, losses and accuracies per seed."""
    return shipped.read_record(_name(kind), directory)


def load_models(kind: str, directory: str | Path | None = None) -> dict[int, nn.Module]:
    """The shipped models of ``kind`` (``"t5"`` or ``"icl"``), one per seed, float32, in ``eval()`` mode.

    Example:
        >>> models = load_models("t5")
        >>> sorted(models), type(models[0]).__name__
        ([0, 1, 2], 'T5')
    """
    record = read_record(kind, directory)
    config_type, expected = (T5Config, T5_CONFIG) if kind == "t5" else (LlamaConfig, ICL_CONFIG)
    if config_type(**record["config"]) != expected:
        raise ValueError(
            f"directory: the stored {kind} config differs from this version's: {record['config']}"
        )
    tensors = shipped.read_weights(_name(kind), directory)
    return {seed: shipped.load_into(new_model(kind), tensors, f"seed{seed}.") for seed in record["seeds"]}


# --- the command ----------------------------------------------------------------------------------


def _train_command(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    models, record = {}, {"runs": {}}
    for seed in args.seeds:
        start = time.perf_counter()
        model, run = train_model(args.model, seed, steps=args.steps, progress=True)
        model = _half_precision_round_trip(model)
        scores = accuracy(args.model, model)
        seconds = time.perf_counter() - start
        print(f"seed {seed}: {run.steps} steps in {run.seconds:.0f} s, final loss {run.final_loss():.4f}")
        print(f"  whole answers right: {json.dumps(scores)}")
        models[seed] = model
        record["runs"][str(seed)] = {"steps": run.steps, "train_seconds": round(run.seconds, 1),
                                     "seconds": round(seconds, 1), "final_loss": run.final_loss(), "accuracy": scores}  # fmt: skip
    seeds = " ".join(map(str, args.seeds))
    record["command"] = (
        f"python -m attn_edu.experiments.multitask train --model {args.model} --seeds {seeds} --threads {args.threads}"
    )
    record["environment"] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": args.threads,
    }
    record["evaluation"] = {"seed": EVAL_SEED, "size": EVAL_SIZE}
    print("wrote", save_models(args.model, models, record, args.out))


def _report_command(args: argparse.Namespace) -> None:
    for seed, model in load_models(args.model, args.dir).items():
        print(
            f"seed {seed}: whole answers right on the test batch: {json.dumps(accuracy(args.model, model))}"
        )


def _model_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=sorted(NAMES), required=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.multitask train --model t5|icl [--seeds 0 1 2] [--out DIR]`` or
    ``... report --model t5|icl [--dir DIR]``."""
    parser, train_parser = cli.command_parser(
        "multitask",
        __doc__,
        train_help="train one model per seed and write the two files",
        report_help="accuracy of the stored models on the test batch",
        shared=_model_option,
        seeds=SEEDS,
        threads=2,
    )
    train_parser.add_argument("--steps", type=int, default=None, help="default: the shipped models' steps")
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())
