"""Notebook 13's study of all-MiniLM-L6-v2's 72 heads on the paraphrase test, and its four slow sweeps.

    study = Study.load()                the model, the 50 triples and their two halves, ready to measure
    study.margins(study.half_b)         cos(anchor, paraphrase) - cos(anchor, distractor) per triple
    importance = study.importance()     each head's first-order importance on the first half (Michel et al.)
    record = measure(study)             the four sweeps (below), about 20 s on two threads
    record = load_record()              the same, as shipped: attn_edu/weights/minilm_heads.json

The sweeps, each a loop of forward passes that the notebook reads from the record instead of running (about 45 s
on a slow CPU), and re-measures at one point of its own choosing to show that the record is this code's output:

* ``exact``: the exact drop of the first half's mean margin when one head is ablated, for eight heads (the two
  most important by the estimate, the two most harmful, four at random);
* ``pruning``: the second half's margins with 0, 18, 36, 54, 63, 68 and 72 heads removed, least important first
  and in three random orders (Michel et al., 2019, section 4);
* ``leave_one_out``: for each of the 50 anchors and each of its tokens, how far the anchor's embedding moves
  (``1 - cos``) when that token is hidden (:func:`~attn_edu.interp.leave_one_out`);
* ``replaced``: how far the 50 anchors' embeddings move (``1 - cos``) when one layer's attention is shuffled
  among the keys it may see or spread uniformly (Jain & Wallace, 2019, section 4.2), and how many of the 50
  triples pass with every layer replaced.

``python -m attn_edu.experiments.minilm_heads train`` measures them again and writes the record (nothing is
trained: the weights are MiniLM's own); ``... report`` prints what the record holds.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attn_edu.data import paraphrase_triples
from attn_edu.experiments import cli, shipped
from attn_edu.interp import (
    attention_layers,
    gate_heads,
    head_ablation,
    head_masks_in_order,
    leave_one_out,
    pruning_masks,
    replaced_attention,
    shuffled_attention,
    uniform_attention,
)

NAME = "minilm_heads"  # the record's stem in attn_edu/weights/
REMOVED = (0, 18, 36, 54, 63, 68, 72)  # heads removed at each point of the pruning curve: 0, 25, ..., 100 %
RANDOM_ORDERS = 3  # random pruning orders, from a generator seeded with 0
RANDOM_CHECKED = 4  # heads checked exactly besides the two most important and the two most harmful

Batch = list[tuple[torch.Tensor, torch.Tensor]]  # anchors, paraphrases, distractors: (ids, mask) each


@dataclass
class Study:
    """MiniLM, its tokenizer and the paraphrase triples, split into the half that ranks the heads (``half_a``,
    the 25 triples of even index) and the half that scores the pruning (``half_b``)."""

    model: nn.Module
    tokenizer: Any
    triples: list[tuple[str, str, str]]

    @classmethod
    def load(cls) -> Study:
        """The installed all-MiniLM-L6-v2 (nothing is downloaded) and the course's 50 triples."""
        from attn_edu.pretrained import load_minilm

        model, tokenizer = load_minilm()
        return cls(model, tokenizer, paraphrase_triples())

    @property
    def shape(self) -> tuple[int, int]:
        """``(L, H)``: the model's layers and heads per layer."""
        layers = attention_layers(self.model)
        return len(layers), layers[0].num_heads

    def encode(self, triples: Sequence[tuple[str, str, str]]) -> Batch:
        """Three padded batches: the anchors, the paraphrases and the distractors."""
        from attn_edu.pretrained import encode

        return [encode(self.tokenizer, [triple[i] for triple in triples]) for i in range(3)]

    @property
    def half_a(self) -> Batch:
        return self.encode(self.triples[0::2])

    @property
    def half_b(self) -> Batch:
        return self.encode(self.triples[1::2])

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The sentence embeddings: the mean of the real tokens' hidden states, scaled to unit length."""
        from attn_edu.pretrained import mean_pool

        return mean_pool(self.model(input_ids, attention_mask), attention_mask)  # (B, C)

    def margins(self, batch: Batch) -> torch.Tensor:
        """``cos(anchor, paraphrase) - cos(anchor, distractor)`` per triple, ``(N,)``: > 0 is a pass."""
        with torch.no_grad():
            a, p, d = (self.embed(ids, mask) for ids, mask in batch)  # (N, C) each, unit length
        return (a * p).sum(-1) - (a * d).sum(-1)  # (N,)

    def importance(self, batch: Batch | None = None) -> torch.Tensor:
        """``(L, H)``: the derivative of the mean margin on ``batch`` (default ``half_a``) with respect to a gate
        on each head's output, at gate 1 (Michel et al., 2019, section 4.1, keeping the sign): the estimated drop
        in the margin without each head, from one backward pass."""
        batch = self.half_a if batch is None else batch
        gates = torch.ones(self.shape, requires_grad=True)  # (L, H): 1 = the model as trained
        with ExitStack() as stack:
            for attn, gate in zip(attention_layers(self.model), gates):
                stack.enter_context(gate_heads(attn, gate))  # head h's output times gate[h], before W^O
            a, p, d = (self.embed(ids, mask) for ids, mask in batch)  # (N, C) each
            ((a * p).sum(-1) - (a * d).sum(-1)).mean().backward()
        return gates.grad  # (L, H)

    def without(self, heads: Sequence[tuple[int, int]], batch: Batch) -> torch.Tensor:
        """The margins on ``batch`` with the given ``(layer, head)`` pairs ablated, ``(N,)``."""
        with head_ablation(self.model, heads):
            return self.margins(batch)

    def pruned(self, masks: torch.Tensor, k: int, batch: Batch) -> torch.Tensor:
        """The margins on ``batch`` with the heads that ``masks[k]`` switches off (0) ablated, ``(N,)``."""
        return self.without([tuple(pair) for pair in (masks[k] == 0).nonzero().tolist()], batch)

    def moved(self, transform: Callable, layers: Sequence[int] | None, ids, mask) -> torch.Tensor:
        """Each sentence's ``1 - cos`` between its embedding with the given layers' attention replaced by
        ``transform`` (every layer when ``layers`` is None) and its own, ``(B,)``."""
        with torch.no_grad():
            original = self.embed(ids, mask)  # (B, C)
            with replaced_attention(self.model, transform, layers=layers):
                return 1 - (self.embed(ids, mask) * original).sum(-1)  # (B,)


def checked_heads(importance: torch.Tensor) -> list[int]:
    """The flat heads (``layer * H + head``) whose exact drop is measured: the two most important by the
    estimate, the two most harmful, then four more from a random permutation seeded with 0."""
    ranked = importance.flatten().argsort(descending=True).tolist()
    extremes = ranked[:2] + ranked[-2:]
    order = torch.randperm(importance.numel(), generator=torch.Generator().manual_seed(0)).tolist()
    return extremes + [i for i in order if i not in extremes][:RANDOM_CHECKED]


def random_orders(num_heads: int) -> list[torch.Tensor]:
    """The random pruning orders: ``RANDOM_ORDERS`` permutations from a generator seeded with 0."""
    g = torch.Generator().manual_seed(0)
    return [torch.randperm(num_heads, generator=g) for _ in range(RANDOM_ORDERS)]


def transforms(seed: int = 0) -> dict[str, Callable]:
    """The two counterfactual attentions: shuffled among the allowed keys (one generator seeded with
    ``seed``, drawn from in the order the sweep calls it) and uniform."""
    g = torch.Generator().manual_seed(seed)
    return {
        "shuffled": lambda weights, allowed: shuffled_attention(weights, allowed, generator=g),
        "uniform": uniform_attention,
    }


def measure(study: Study | None = None, *, progress: bool = False) -> dict[str, Any]:
    """The four sweeps of the module docstring, as a record of plain lists (JSON-ready)."""
    study = Study.load() if study is None else study
    (L, H), log = study.shape, (print if progress else lambda *_: None)
    half_a, half_b = study.half_a, study.half_b
    importance = study.importance(half_a)
    full_a = study.margins(half_a).mean().item()
    checked = checked_heads(importance)
    exact = [full_a - study.without([divmod(i, H)], half_a).mean().item() for i in checked]
    log("exact drops: done")
    schedules = [pruning_masks(importance)] + [head_masks_in_order(o, L, H) for o in random_orders(L * H)]
    full_b, no_heads = study.margins(half_b), study.without([divmod(i, H) for i in range(L * H)], half_b)
    curves = [
        [full_b.tolist()]
        + [study.pruned(masks, k, half_b).tolist() for k in REMOVED[1:-1]]
        + [no_heads.tolist()]
        for masks in schedules
    ]  # (1 + RANDOM_ORDERS, 7, 25)
    log("pruning curves: done")
    ids, mask = study.encode(study.triples)[0]  # the 50 anchors
    with torch.no_grad():
        loo = leave_one_out(study.embed, ids, mask)  # (50, T)
    log("leave-one-out: done")
    moved = {name: [] for name in ("shuffled", "uniform")}
    every_layer = {}
    replacements = transforms()
    for layer in range(L):
        for name, transform in replacements.items():
            moved[name].append(study.moved(transform, [layer], ids, mask).mean().item())
    everything = study.encode(study.triples)
    for name, transform in replacements.items():
        with replaced_attention(study.model, transform):  # every layer at once
            every_layer[name] = study.margins(everything).tolist()
    log("replaced attention: done")
    return {
        "command": f"python -m attn_edu.experiments.{NAME} train",
        "importance": importance.tolist(),
        "exact": {"heads": checked, "drops": exact},
        "pruning": {"removed": list(REMOVED), "by_importance": curves[0], "random": curves[1:]},
        "leave_one_out": loo.tolist(),
        "replaced": {"moved": moved, "every_layer_margins": every_layer},
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
    }


def load_record(directory: str | None = None) -> dict[str, Any]:
    """The shipped record of :func:`measure` (``attn_edu/weights/minilm_heads.json``)."""
    return shipped.read_record(NAME, directory)


def _train_command(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # notebook 13's setting
    record = measure(progress=True)
    path = shipped.save_record(NAME, record, args.out)
    print("wrote", path)


def _report_command(args: argparse.Namespace) -> None:
    record = load_record(args.dir)
    pruning = torch.tensor(record["pruning"]["by_importance"])  # (7, 25)
    print(f"{NAME}: {record['command']} (torch {record['environment']['torch']})")
    print("heads removed          ", *record["pruning"]["removed"])
    print("passed, by importance  ", *(pruning > 0).sum(-1).tolist())
    print("shuffled, moved        ", *(f"{m:.2f}" for m in record["replaced"]["moved"]["shuffled"]))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.minilm_heads train [--out DIR]`` or ``... report [--dir DIR]``."""
    parser, _ = cli.command_parser(
        NAME,
        __doc__,
        train_help="measure the four sweeps again and write the record (nothing is trained)",
        report_help="what the stored record holds",
    )
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())
