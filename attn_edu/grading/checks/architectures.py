"""Checks for notebook 09's exercises: BERT's masking, GPT's shifted loss, T5's sentinels, GPT's size, the loss
by position.

- 09.1 the 80/10/10 rule of masked language modelling, with the random draws handed in (so the answer is
  deterministic), against :func:`attn_edu.objectives.mlm_rule`, the rule :func:`~attn_edu.objectives.mlm_mask` applies;
- 09.2 the causal language-modelling loss, against :func:`attn_edu.objectives.causal_lm_loss`;
- 09.3 T5's encoder input: one sentinel per hidden span, numbered ``<extra_id_0>, <extra_id_1>, ...``
  = ``sentinel_start_id, sentinel_start_id − 1, ...``, against
  :func:`attn_edu.objectives.replace_spans_with_sentinels` (what :func:`~attn_edu.objectives.span_corruption` uses);
- 09.4 GPT-2's parameter count from its sizes, against :func:`attn_edu.params.gpt_parameter_count`;
- 09.6 (a measurement) the loss at each position, against :func:`attn_edu.objectives.mlm_loss` on each column,
  and checked without it: weighted by the scored targets, its mean is ``F.cross_entropy`` over every token;
- 09.7 (a training run) the given tiny GPT trained on the copy task: its weights against the same recipe run
  by the check, and judged on a held-out batch the function never sees (the loss must fall far below log V);
09.5 builds a tiny GPT-2's logits from Hugging Face's weights, from the block of 08.5
(:mod:`attn_edu.grading.checks.blocks`), against transformers' GPT2LMHeadModel.

The known-wrong versions are the usual slips: masking ``[CLS]``, always using ``[MASK]``, scoring every
position; no shift or a shift the wrong way; sentinels counting up or one per token; a tied head counted
twice, biases or LayerNorms forgotten; one loss per sequence, ignored targets averaged in as 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_edu.grading.checks.blocks import (
    GPT2_NORM_EPS,
    gpt2_block_state,
    gpt2_block_variant,
    gpt2_block_weights,
)
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property
from attn_edu.models import GPT, GPTConfig
from attn_edu.objectives import (
    IGNORE_INDEX,
    causal_lm_loss,
    mlm_loss,
    mlm_rule,
    replace_spans_with_sentinels,
)
from attn_edu.params import gpt_parameter_count

# ---------------------------------------------------------------------------------------------------------
# 09.1 BERT's 80/10/10 masking, with the random numbers given


def _mlm_variant(
    input_ids: torch.Tensor,
    u: torch.Tensor,
    random_ids: torch.Tensor,
    mask_token_id: int,
    special_ids: torch.Tensor,
    *,
    mask_prob: float = 0.15,
    skip_specials: bool = True,
    mask_share: float = 0.8,
    random_share: float = 0.1,
    score_all: bool = False,
    label_inputs: bool = False,
) -> torch.Tensor:
    """Wrong versions of :func:`attn_edu.objectives.mlm_rule`, written out: each flag is one slip."""
    picked = u < mask_prob  # (B, T)
    if skip_specials:
        picked &= ~torch.isin(input_ids, special_ids)
    to_mask = picked & (u < mask_share * mask_prob)
    to_random = picked & ~to_mask & (u < (mask_share + random_share) * mask_prob)
    inputs = torch.where(to_mask, mask_token_id, input_ids)  # (B, T)
    inputs = torch.where(to_random, random_ids, inputs)  # (B, T)
    source = inputs if label_inputs else input_ids
    labels = source if score_all else source.masked_fill(~picked, IGNORE_INDEX)  # (B, T)
    return torch.stack([inputs, labels])  # (2, B, T)


def _mlm_reference(input_ids, u, random_ids, mask_token_id, special_ids):
    inputs, labels = mlm_rule(input_ids, u, random_ids, mask_token_id=mask_token_id, special_ids=special_ids)
    return torch.stack([inputs, labels])  # (2, B, T)


def _mlm_cases(g: torch.Generator) -> list[Case]:
    def case(B: int, T: int, V: int, mask_token_id: int, specials: list[int]) -> Case:
        ids = torch.randint(len(specials) + 1, V, (B, T), generator=g)  # (B, T) plain tokens
        ids[:, 0] = specials[0]  # [CLS] first
        ids[:, -1] = specials[-1]  # [SEP] (or [PAD]) last
        u = torch.rand(B, T, generator=g) * 0.3  # (B, T) about half the tokens picked: every band shows
        u[:, 0] = 0.01  # [CLS] would be picked and masked if specials were not skipped
        u[:, 1:5] = torch.tensor([0.05, 0.125, 0.14, 0.5])  # one plain token in each band, whatever the draw
        random_ids = torch.randint(V, (B, T), generator=g)  # (B, T)
        return Case((ids, u, random_ids, mask_token_id, torch.tensor(specials)))

    return [
        case(3, 11, 30, 3, [1, 2]),
        case(2, 17, 57, 56, [0, 1, 2]),  # [MASK] is the last id
        case(5, 7, 13, 4, [1, 3]),
        case(1, 29, 101, 3, [0, 1, 2]),
    ]


MLM = Exercise(
    exercise_id="09.1",
    title="BERT's masking: pick 15% of the non-special tokens, then 80% [MASK], 10% random, 10% kept",
    function_name="mlm_inputs_and_labels",
    arg_names=("input_ids", "u", "random_ids", "mask_token_id", "special_ids"),
    reference=_mlm_reference,
    make_cases=_mlm_cases,
    mistakes=(
        Mistake(
            lambda *a: _mlm_variant(*a, skip_specials=False),
            "special tokens ([CLS], [SEP], padding) are picked too; they are never masked or scored: "
            "leave out every token whose id is in special_ids before anything else.",
        ),
        Mistake(
            lambda *a: _mlm_variant(*a, mask_share=1.0, random_share=0.0),
            "every picked token becomes [MASK]; only 80% do (u < 0.12), 10% get a random id "
            "(0.12 <= u < 0.135) and 10% stay as they are, so the model must predict real tokens too.",
        ),
        Mistake(
            lambda *a: _mlm_variant(*a, score_all=True),
            "every position has a label; only the picked ones are scored, the others get -100.",
        ),
        Mistake(
            lambda *a: _mlm_variant(*a, label_inputs=True),
            "the labels hold the corrupted inputs ([MASK], random ids); they must hold the original "
            "token, the one the model has to recover.",
        ),
        Mistake(
            lambda *a: _mlm_variant(*a, mask_share=0.1, random_share=0.1),
            "the shares are the wrong way round (10% [MASK], 80% unchanged): [MASK] takes the lowest "
            "80% of the picked band (u < 0.12), a random id the next 10%, and only the top 10% stay.",
        ),
    ),
    hints=(
        "one boolean (B, T) tensor says which tokens are picked: u below 0.15 and the token not special. "
        "u then decides what a picked token becomes: [MASK] below 0.12, a random id from 0.12 to 0.135, "
        "itself from 0.135 to 0.15.",
        "the inputs are built in two replacements: first mask_token_id where a token is picked and u < "
        "0.12, then the random id where it is picked and 0.12 ≤ u < 0.135; every other token keeps its "
        "id. The labels are a separate tensor, -100 where nothing is picked.",
        "a sketch: picked = (u < 0.15) & ~torch.isin(input_ids, special_ids); two torch.where calls "
        "build the inputs; the labels come from the original input_ids, not the corrupted inputs: "
        "input_ids.masked_fill(~picked, -100); stack the inputs first, the labels second.",
    ),
    difficulty=2,
    minutes=15,
)


# ---------------------------------------------------------------------------------------------------------
# 09.2 the causal language-modelling loss


def _clm_cases(g: torch.Generator) -> list[Case]:
    def case(B: int, T: int, V: int, prompt: list[int] | None = None) -> Case:
        logits = 2 * torch.randn(B, T, V, generator=g)  # (B, T, V)
        labels = torch.randint(V, (B, T), generator=g)  # (B, T)
        for b, n in enumerate(prompt or []):
            labels[b, :n] = IGNORE_INDEX  # an unscored prompt, of a different length per row
        return Case((logits, labels))

    return [
        case(2, 7, 11),
        case(3, 9, 5, prompt=[2, 5, 0]),  # rows score different numbers of tokens
        case(1, 13, 17),
        case(4, 6, 23, prompt=[1, 3, 4, 2]),
    ]


def _ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)


def _per_row_mean(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    losses = F.cross_entropy(
        logits[:, :-1].transpose(1, 2), labels[:, 1:], ignore_index=IGNORE_INDEX, reduction="none"
    )  # (B, T-1)
    scored = (labels[:, 1:] != IGNORE_INDEX).float()  # (B, T-1)
    return ((losses * scored).sum(1) / scored.sum(1)).mean()


CLM = Exercise(
    exercise_id="09.2",
    title="the causal LM loss: position t's logits are scored on token t + 1, -100 labels skipped",
    function_name="causal_lm_loss",
    arg_names=("logits", "labels"),
    reference=lambda logits, labels: causal_lm_loss(logits, labels),
    make_cases=_clm_cases,
    mistakes=(
        Mistake(
            _ce,
            "no shift: position t is scored on its own token t, which it can see in its input. Position "
            "t must be scored on token t + 1: drop the last position of the logits and the first of the "
            "labels.",
        ),
        Mistake(
            lambda logits, labels: _ce(logits[:, 1:], labels[:, :-1]),
            "the shift goes the wrong way: position t + 1 is asked for token t, the past. Drop the last "
            "position of the logits and the first of the labels, not the other way round.",
        ),
        Mistake(
            _per_row_mean,
            "the loss is averaged per sequence, then over the batch; average over every scored token at "
            "once (rows that score more tokens weigh more), as cross_entropy on the flattened tokens does.",
        ),
        Mistake(
            lambda logits, labels: F.cross_entropy(
                logits[:, :-1].flatten(0, 1),
                labels[:, 1:].flatten(),
                ignore_index=IGNORE_INDEX,
                reduction="sum",
            ),
            "that is the sum over tokens; the loss is the mean over the scored tokens.",
        ),
    ),
    hints=(
        "the logits at position t predict token t + 1: drop the last position of the logits and the "
        "first of the labels.",
        "after the shift there are B · (T - 1) scored positions: flatten the logits to one row of V per "
        "token and the labels to one id per token; the library cross-entropy skips labels equal to -100 "
        "(its ignore index) by default.",
        "a sketch: F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1)) with its "
        "default mean reduction averages over the scored tokens of the whole batch; averaging per row "
        "first would weigh short rows too much.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 09.3 T5's encoder input: one sentinel per span


def _runs(length: int, starts_and_lengths: list[tuple[int, int]]) -> torch.Tensor:
    noise = torch.zeros(length, dtype=torch.bool)
    for start, n in starts_and_lengths:
        noise[start : start + n] = True
    return noise  # (T,)


def _span_cases(g: torch.Generator) -> list[Case]:
    def tokens(T: int) -> torch.Tensor:
        return torch.randint(5, 90, (T,), generator=g)  # (T,) far below the sentinels

    random_noise = torch.rand(23, generator=g) < 0.35
    random_noise[0] = True  # a span right at the start
    return [
        Case((tokens(12), _runs(12, [(2, 3), (8, 2)]), 199)),
        Case((tokens(9), _runs(9, [(0, 1), (3, 1), (6, 3)]), 149)),  # spans at both ends
        Case((tokens(23), random_noise, 127)),
        Case((tokens(15), _runs(15, [(4, 1)]), 99)),  # a single span of one token
        Case((tokens(20), _runs(20, [(1, 2), (5, 2), (9, 2), (13, 2), (17, 2)]), 299)),
    ]


def _span_reference(tokens: torch.Tensor, noise: torch.Tensor, sentinel_start_id: int) -> torch.Tensor:
    return replace_spans_with_sentinels(tokens, noise, sentinel_start_id)  # span_corruption's input


def _sentinels_counting_up(tokens, noise, sentinel_start_id):
    starts = noise & ~torch.cat([noise.new_zeros(1), noise[:-1]])
    sentinel = sentinel_start_id + starts.long().cumsum(0) - 1  # <X0> = start, then start + 1, ...
    return torch.where(starts, sentinel, tokens)[~noise | starts]


def _one_sentinel_per_token(tokens, noise, sentinel_start_id):
    sentinel = sentinel_start_id + 1 - noise.long().cumsum(0)
    return torch.where(noise, sentinel, tokens)


SPANS = Exercise(
    exercise_id="09.3",
    title="T5's encoder input: each run of hidden tokens becomes one sentinel, counting down from the start id",
    function_name="span_inputs",
    arg_names=("tokens", "noise", "sentinel_start_id"),
    reference=_span_reference,
    make_cases=_span_cases,
    mistakes=(
        Mistake(
            _sentinels_counting_up,
            "the sentinels count up; T5's <extra_id_0>, <extra_id_1>, ... sit at the end of the vocabulary "
            "counting *down*: span k gets sentinel_start_id - k.",
        ),
        Mistake(
            _one_sentinel_per_token,
            "each hidden token got its own sentinel; a whole run of hidden tokens (a span) is replaced "
            "by one sentinel. Find the first token of each run: a hidden token whose previous token is "
            "not hidden.",
        ),
        Mistake(
            lambda tokens, noise, s: replace_spans_with_sentinels(tokens, noise, s - 1),
            "off by one: the first span gets sentinel_start_id itself (<extra_id_0>), the second "
            "sentinel_start_id - 1.",
        ),
        Mistake(
            lambda tokens, noise, s: torch.where(noise, s, tokens),
            "the hidden tokens are overwritten one by one with a single sentinel; replace each span by "
            "one sentinel (so the input gets shorter) and number the spans, counting down from "
            "sentinel_start_id.",
        ),
        Mistake(
            lambda tokens, noise, s: replace_spans_with_sentinels(tokens, ~noise, s),
            "that is the decoder *target* (the clean tokens replaced); the encoder input keeps the "
            "clean tokens and replaces the hidden spans (noise = True).",
        ),
    ),
    hints=(
        "a span starts where noise is True and the previous token's noise is not (the first token has no "
        "previous one: count it as not noise). Each start gets one sentinel; the rest of its span "
        "disappears.",
        "the k-th start (k = 0, 1, ...) gets sentinel_start_id - k: a running count of the starts along "
        "the sequence (1, 2, ...) numbers them. Then write the sentinels over the tokens at the starts "
        "and drop the other hidden tokens.",
        "a sketch: starts = noise & ~torch.cat([noise.new_zeros(1), noise[:-1]]); the numbers are "
        "starts.long().cumsum(0); write the sentinels at the starts with torch.where, then index with a "
        "boolean mask that keeps every clean token and the first position of every span.",
    ),
    difficulty=3,
    minutes=20,
)


# ---------------------------------------------------------------------------------------------------------
# 09.4 GPT-2's parameter count


def _count_reference(vocab_size, max_seq_len, embed_dim, num_layers, ffn_dim, tie_embeddings):
    config = GPTConfig(
        vocab_size=vocab_size,
        max_seq_len=max_seq_len,
        embed_dim=embed_dim,
        num_layers=num_layers,
        num_heads=1,  # the count does not depend on how C is cut into heads
        ffn_dim=ffn_dim,
        tie_embeddings=tie_embeddings,
    )
    return torch.tensor(gpt_parameter_count(config))


def _count_variant(V, P, C, L, F, tied, *, head=0, biases=True, norms=True, final_norm=True, positions=True):
    per_layer = 4 * C * C + 2 * C * F  # weights: q, k, v, out; up, down
    per_layer += (4 * C + F + C) if biases else 0
    per_layer += 4 * C if norms else 0
    total = V * C + (P * C if positions else 0) + L * per_layer + (2 * C if final_norm else 0)
    total += (0 if tied else V * C) + head
    return torch.tensor(total)


def _count_cases(g: torch.Generator) -> list[Case]:
    def sizes() -> tuple[int, ...]:
        C = int(torch.randint(3, 40, (1,), generator=g))
        return (
            int(torch.randint(11, 500, (1,), generator=g)),  # V
            int(torch.randint(5, 130, (1,), generator=g)),  # P
            C,
            int(torch.randint(1, 7, (1,), generator=g)),  # L
            int(torch.randint(5, 150, (1,), generator=g)),  # F, not always 4 C
        )

    return [
        Case((50257, 1024, 768, 12, 3072, True)),  # GPT-2 small
        Case((*sizes(), True)),
        Case((*sizes(), False)),  # an untied head
        Case((50257, 1024, 1600, 48, 6400, True)),  # GPT-2 XL
        Case((*sizes(), True)),
    ]


COUNT = Exercise(
    exercise_id="09.4",
    title="the number of parameters of a GPT-2-style model from its sizes",
    function_name="gpt_parameter_count",
    arg_names=("vocab_size", "max_seq_len", "embed_dim", "num_layers", "ffn_dim", "tie_embeddings"),
    reference=_count_reference,
    make_cases=_count_cases,
    mistakes=(
        Mistake(
            lambda V, P, C, L, F, tied: _count_variant(V, P, C, L, F, tied, head=V * C if tied else 0),
            "the tied output head is counted twice: when the embeddings are tied the lm_head *is* the "
            "token embedding matrix, one V·C tensor; add V·C only when the head is untied.",
        ),
        Mistake(
            lambda V, P, C, L, F, tied: _count_variant(V, P, C, L, F, tied, biases=False),
            "the biases are missing: GPT-2's q, k, v and output projections have C each (4C), and the "
            "FFN's up and down projections F and C.",
        ),
        Mistake(
            lambda V, P, C, L, F, tied: _count_variant(V, P, C, L, F, tied, norms=False, final_norm=False),
            "the LayerNorms are missing: each has a gain and a bias (2C); two per block and a final one.",
        ),
        Mistake(
            lambda V, P, C, L, F, tied: _count_variant(V, P, C, L, F, tied, final_norm=False),
            "the final LayerNorm after the last block (2C) is missing; GPT-2 added it (Radford et al., "
            "2019, section 2.3).",
        ),
        Mistake(
            lambda V, P, C, L, F, tied: _count_variant(V, P, C, L, F, tied, positions=False),
            "the learned position table is missing: max_seq_len rows of C numbers.",
        ),
        Mistake(
            lambda V, P, C, L, F, tied: _count_variant(V, P, C, L, 4 * C, tied),
            "the FFN width is taken as 4·embed_dim; use ffn_dim (GPT-2 uses 4C, but the config may not).",
        ),
    ),
    hints=(
        "add up the tensors: token table V·C, position table P·C, per block the attention (four C×C "
        "projections with biases), the FFN (C×F and F×C with biases) and two LayerNorms, then a final "
        "LayerNorm; the head adds V·C only when it is not tied.",
        "count per block: 4C² + 4C for attention (four C × C projections with biases), 2CF + F + C for "
        "the FFN (C × F and F × C, with biases), and 4C for the two LayerNorms (a gain and a bias each); "
        "the embeddings and the final LayerNorm sit outside the blocks.",
        "the total is the two tables, plus num_layers times the per-block count, plus 2C for the "
        "final LayerNorm, plus one more V·C when tie_embeddings is False; wrap the Python int in "
        "torch.tensor.",
    ),
    difficulty=2,
    minutes=20,
)


# ---------------------------------------------------------------------------------------------------------
# 09.6 the loss at each position, measured against cross_entropy over every token


def _loss_by_position_reference(logits, targets, ignore_index=IGNORE_INDEX):
    labels = targets.masked_fill(targets == ignore_index, IGNORE_INDEX)  # mlm_loss skips -100
    return torch.stack([mlm_loss(logits[:, t : t + 1], labels[:, t : t + 1]) for t in range(logits.shape[1])])


def _token_losses(logits, targets, ignore_index, dim=-1):
    """Per-token cross-entropy (B, T), 0 where the target is ignored; log-softmax over ``dim``."""
    scored = targets != ignore_index  # (B, T)
    picked = logits.log_softmax(dim).gather(-1, targets.where(scored, 0).unsqueeze(-1)).squeeze(-1)  # (B, T)
    return -picked * scored, scored


def _by_position_variant(logits, targets, ignore_index=IGNORE_INDEX, *, dim=-1, over=0, zeros_in=False):
    losses, scored = _token_losses(logits, targets, ignore_index, dim)  # (B, T) each
    count = scored.new_ones(scored.shape) if zeros_in else scored
    return losses.sum(over) / count.sum(over)  # (T,) over the batch, (B,) over the positions


def _loss_by_position_cases(g: torch.Generator) -> list[Case]:
    def case(B: int, T: int, V: int, ignore_index: int | None = None, group: str = "values") -> Case:
        logits = 2 * torch.randn(B, T, V, generator=g) + torch.randn(B, T, 1, generator=g)  # (B, T, V)
        skip = IGNORE_INDEX if ignore_index is None else ignore_index
        targets = torch.randint(1, V, (B, T), generator=g)  # (B, T) never 0: 0 may be the ignore_index
        ignored = torch.rand(B, T, generator=g) < 0.4  # (B, T)
        ignored[0] = False  # every position keeps a scored target in row 0
        ignored[-1, : T // 2 + 1] = True  # an unscored prompt in the last row, whatever the draw
        targets = targets.masked_fill(ignored, skip)
        return Case((logits, targets), {} if ignore_index is None else {"ignore_index": ignore_index}, group)

    return [
        case(3, 7, 11),
        case(5, 4, 9, ignore_index=0),  # a padding id of the vocabulary
        case(2, 9, 6, ignore_index=-1),
        case(4, 6, 17),
        case(6, 5, 13, group="agrees with cross_entropy"),
        case(2, 11, 7, ignore_index=0, group="agrees with cross_entropy"),
    ]


def _agrees_with_cross_entropy(case: Case, output: torch.Tensor) -> str | None:
    logits, targets = case.args
    ignore_index = case.kwargs.get("ignore_index", IGNORE_INDEX)
    counts = (targets != ignore_index).sum(0)  # (T,) scored targets per position
    if output.shape != counts.shape:
        return f"expected one loss per position, shape {tuple(counts.shape)}, got {tuple(output.shape)}"
    if not bool(torch.isfinite(output).all() and (output >= 0).all()):
        return f"a cross-entropy lies in [0, inf), got {[round(float(x), 4) for x in output]}"
    weighted = float((output.double() * counts).sum() / counts.sum())
    overall = float(F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=ignore_index))
    if abs(weighted - overall) > 1e-5 + 1e-4 * abs(overall):
        return (
            f"the count-weighted mean of the answer is {weighted:.5f}, F.cross_entropy over all "
            f"{int(counts.sum())} scored tokens gives {overall:.5f}"
        )
    return None


LOSS_BY_POSITION = Exercise(
    exercise_id="09.6",
    title="the mean cross-entropy at each position t over the batch, ignored targets skipped",
    function_name="loss_by_position",
    arg_names=("logits", "targets"),
    reference=_loss_by_position_reference,
    make_cases=_loss_by_position_cases,
    mistakes=(
        Mistake(
            lambda logits, targets, ignore_index=IGNORE_INDEX: _by_position_variant(
                logits, targets, ignore_index, over=1
            ),
            "that is one loss per sequence, shape (B,): average over the batch (dim 0) for each position, "
            "so the answer has shape (T,).",
        ),
        Mistake(
            lambda logits, targets, ignore_index=IGNORE_INDEX: _by_position_variant(
                logits, targets, ignore_index, zeros_in=True
            ),
            "the ignored targets are averaged in as losses of 0; divide each position's sum by the "
            "number of targets scored there, not by B.",
        ),
        Mistake(
            lambda logits, targets, ignore_index=IGNORE_INDEX: _by_position_variant(
                logits, targets, ignore_index, dim=1
            ),
            "the log-softmax runs over the positions (dim 1); each token's distribution is over the "
            "vocabulary, the last dim.",
        ),
    ),
    properties=(
        Property(
            "agrees with cross_entropy",
            "weighted by the number of scored targets at each position, the answer's mean must be the "
            "loss over every token (the library cross-entropy with the same ignore index), and no loss "
            "may be negative.",
            holds=_agrees_with_cross_entropy,
        ),
    ),
    hints=(
        "one loss per token first, then a mean over the batch for each position that counts only the "
        "targets that are scored there.",
        "the library cross-entropy without reduction keeps one loss per token, (B, T), with 0 at the "
        "ignored targets; it wants the classes in dim 1. Sum those losses over the batch and divide by "
        "how many targets each position really scored.",
        "a sketch: losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction='none', "
        "ignore_index=ignore_index), (B, T); the count per position is (targets != ignore_index).sum(0); "
        "both sums are (T,).",
    ),
    difficulty=2,
    minutes=15,
    kind="measure",
)


# ---------------------------------------------------------------------------------------------------------
# 09.5 a tiny GPT-2 forward pass from Hugging Face's weights (build and verify against GPT2LMHeadModel)

GPT2_LAYER_ARGS = (
    "ln_1_weight", "ln_1_bias", "attn_c_attn_weight", "attn_c_attn_bias", "attn_c_proj_weight", "attn_c_proj_bias",
    "ln_2_weight", "ln_2_bias", "mlp_c_fc_weight", "mlp_c_fc_bias", "mlp_c_proj_weight", "mlp_c_proj_bias",
)  # fmt: skip


def _gpt2_model_case(g: torch.Generator, B: int, T: int, V: int, P: int, C: int, L: int, H: int) -> Case:
    layers = [gpt2_block_weights(g, C, 4 * C) for _ in range(L)]
    stacked = tuple(torch.stack(parts) for parts in zip(*layers, strict=True))  # each (L, ...)
    return Case(
        (
            torch.randint(0, V, (B, T), generator=g),  # input_ids (B, T)
            torch.randn(V, C, generator=g),  # wte_weight (V, C), also the tied lm_head
            0.5 * torch.randn(P, C, generator=g),  # wpe_weight (P, C), P >= T
            *stacked,
            1.0 + 0.5 * torch.randn(C, generator=g),  # ln_f_weight (C,)
            0.5 * torch.randn(C, generator=g),  # ln_f_bias (C,)
            H,
        )
    )


def _gpt2_model_cases(g: torch.Generator) -> list[Case]:
    return [
        _gpt2_model_case(g, 2, 5, 37, 11, 12, 2, 3),  # B, T, V, P, C, L, H
        _gpt2_model_case(g, 1, 7, 29, 7, 15, 1, 5),  # one layer; T = P, every position used
        _gpt2_model_case(g, 3, 6, 41, 13, 10, 3, 2),  # three layers
        _gpt2_model_case(g, 2, 4, 23, 9, 18, 2, 3),
    ]


def _split_gpt2_args(args: tuple) -> tuple:
    input_ids, wte, wpe, *rest = args
    *stacked, ln_f_w, ln_f_b, num_heads = rest
    return input_ids, wte, wpe, stacked, ln_f_w, ln_f_b, int(num_heads)


def _gpt2_model_reference(*args: torch.Tensor | int) -> torch.Tensor:
    """The library's :class:`attn_edu.models.GPT` with the weights copied in, block by block."""
    input_ids, wte, wpe, stacked, ln_f_w, ln_f_b, num_heads = _split_gpt2_args(args)
    (V, C), P, L = wte.shape, wpe.shape[0], stacked[0].shape[0]
    config = GPTConfig(
        vocab_size=V, max_seq_len=P, embed_dim=C, num_layers=L, num_heads=num_heads,
        ffn_dim=stacked[8].shape[-1], norm_eps=GPT2_NORM_EPS,
    )  # fmt: skip
    state = {
        "token_embedding.weight": wte, "lm_head.weight": wte,  # tied: one (V, C) matrix
        "position_embedding.embedding.weight": wpe,
        "final_norm.weight": ln_f_w, "final_norm.bias": ln_f_b,
    }  # fmt: skip
    for i in range(L):
        block = gpt2_block_state(*(t[i] for t in stacked))
        state |= {f"blocks.{i}.{name}": t for name, t in block.items()}
    model = GPT(config)
    model.load_state_dict(state)
    return model.eval()(input_ids).detach()  # (B, T, V)


def _gpt2_model_variant(*args, positions=True, final_norm=True, **block_slip):  # noqa: ANN001, ANN202
    """The forward pass with one piece swapped for a wrong one (the known mistakes below)."""
    input_ids, wte, wpe, stacked, ln_f_w, ln_f_b, num_heads = _split_gpt2_args(args)
    T = input_ids.shape[1]
    x = wte[input_ids] + (wpe[:T] if positions else 0.0)  # (B, T, C)
    for i in range(stacked[0].shape[0]):
        x = gpt2_block_variant(x, *(t[i] for t in stacked), num_heads, **block_slip)  # (B, T, C)
    if final_norm:
        x = F.layer_norm(x, (x.shape[-1],), ln_f_w, ln_f_b, GPT2_NORM_EPS)  # (B, T, C)
    return x @ wte.T  # (B, T, V)


GPT2_MODEL = Exercise(
    exercise_id="09.5",
    kind="build",
    title="a tiny GPT-2 to logits from Hugging Face's weights: embeddings, L blocks, ln_f, tied lm_head",
    function_name="gpt2_logits",
    arg_names=(
        "input_ids",
        "wte_weight",
        "wpe_weight",
        *GPT2_LAYER_ARGS,
        "ln_f_weight",
        "ln_f_bias",
        "num_heads",
    ),
    reference=_gpt2_model_reference,
    make_cases=_gpt2_model_cases,
    mistakes=(
        Mistake(
            lambda *a: _gpt2_model_variant(*a, positions=False),
            "the position embeddings are missing: GPT-2's input is wte[input_ids] + wpe[positions], with "
            "positions 0 .. T - 1; without them the model cannot tell the order of the tokens.",
        ),
        Mistake(
            lambda *a: _gpt2_model_variant(*a, final_norm=False),
            "the final LayerNorm is missing: GPT-2 normalises the stream once more after the last block "
            "(ln_f, Radford et al., 2019, §2.3) before the lm_head.",
        ),
        Mistake(
            lambda *a: _gpt2_model_variant(*a, causal=False),
            "the blocks have no causal mask: each token may attend only to itself and the tokens before it.",
        ),
        Mistake(
            lambda *a: _gpt2_model_variant(*a, gelu="none"),
            "the MLP uses the exact (erf) GELU; GPT-2's 'gelu_new' is the tanh approximation.",
        ),
    ),
    hints=(
        "three stages: embed (a token row plus a position row per token), run the L blocks in order, then "
        "ln_f and the tied head. Layer i's tensors are the i-th slices of the stacked ones.",
        "each block is Exercise 08.5's: pre-norm, causal, Conv1D weights (in, out), the tanh GELU. The position "
        "rows are the first T rows of wpe_weight.",
        "the lm_head has no weight of its own: it reuses wte_weight, (V, C), so the logits of a normalised "
        "stream (B, T, C) come from a product with its transpose.",
    ),
    difficulty=3,
    minutes=55,
)


EXERCISES = (MLM, CLM, SPANS, COUNT, GPT2_MODEL, LOSS_BY_POSITION)  # 09.7, a training run: training.py
