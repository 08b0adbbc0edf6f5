"""Checks for notebook 13's exercises: two head scores, a head ablation, a pruning schedule, a copying score.

The references are :func:`attn_edu.interp.previous_token_score`, :func:`attn_edu.interp.induction_score`,
:func:`attn_edu.interp.gate_heads` (a head's output zeroed before ``W^O``, what
:func:`~attn_edu.interp.head_ablation` does), :func:`attn_edu.interp.pruning_masks` and
:func:`attn_edu.circuits.copying_score` (also checked on circuits with known eigenvalues). Cases use causal
attention patterns from :func:`attn_edu.attention.attention_weights`, some with planted previous-token or
induction stripes, odd head counts, sizes that are not powers of two and, for the previous-token score, a KV
cache (``S > T``). The known-wrong versions are the slips these ideas invite: the diagonal instead of the
sub-diagonal, the repeated token instead of the one after it, a head's channels taken with the wrong stride,
the most important heads pruned first, the eigenvalues of ``W_OV`` without the embeddings.
"""

from __future__ import annotations

import torch

from attn_edu import circuits, interp
from attn_edu.attention import attention_weights
from attn_edu.circuits import head_circuits
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property
from attn_edu.masks import causal_mask
from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
from attn_edu.multihead import MultiHeadAttention, merge_heads

# ---------------------------------------------------------------------------------------------------------
# Attention patterns to score


def _causal_pattern(
    g: torch.Generator, B: int, H: int, T: int, S: int, sharpness: float = 2.0
) -> torch.Tensor:
    """Random causal (bottom-right) attention weights ``(B, H, T, S)``."""
    q = sharpness * torch.randn(B, H, T, 8, generator=g)  # (B, H, T, D)
    k = torch.randn(B, H, S, 8, generator=g)  # (B, H, S, D)
    return attention_weights(q, k, causal_mask(T, S))  # (B, H, T, S)


def _plant(weights: torch.Tensor, head: int, distance: int, strength: float = 0.8) -> torch.Tensor:
    """Move ``strength`` of head ``head``'s weight onto the key ``distance`` tokens back, where it exists."""
    B, H, T, S = weights.shape
    out = weights.clone()
    stripe = torch.zeros(T, S)  # (T, S)
    for t in range(T):
        s = S - T + t - distance  # query t sits at absolute position S - T + t
        if 0 <= s:
            stripe[t, s] = 1.0
    has = stripe.sum(dim=-1, keepdim=True) > 0  # (T, 1) queries that have such a key
    out[:, head] = torch.where(has, (1 - strength) * weights[:, head] + strength * stripe, weights[:, head])
    return out  # (B, H, T, S), rows still sum to 1


def _diagonal_mean(weights: torch.Tensor, offset: int, *, shift: int | None = None) -> torch.Tensor:
    T, S = weights.shape[-2:]
    shift = S - T if shift is None else shift
    return weights.diagonal(offset=shift - offset, dim1=-2, dim2=-1).mean(dim=(0, 2))  # (H,)


# ---------------------------------------------------------------------------------------------------------
# 13.1 previous-token score


def _previous_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_plant(_causal_pattern(g, 2, 3, 7, 7), 1, 1),)),
        Case((_plant(_causal_pattern(g, 1, 5, 6, 11), 3, 1, 0.9),)),  # a KV cache: 5 earlier keys
        Case((_causal_pattern(g, 3, 1, 9, 9, sharpness=4.0),)),
        Case((_plant(_causal_pattern(g, 2, 3, 5, 8), 0, 1),)),  # T != S again, an odd head count
        Case((_plant(_causal_pattern(g, 1, 7, 12, 12), 6, 1, 0.6),)),
    ]


def _sum_over_queries(weights: torch.Tensor) -> torch.Tensor:
    T, S = weights.shape[-2:]
    return weights.diagonal(offset=S - T - 1, dim1=-2, dim2=-1).sum(dim=-1).mean(dim=0)  # (H,)


def _over_all_queries(weights: torch.Tensor) -> torch.Tensor:
    T, S = weights.shape[-2:]
    return weights.diagonal(offset=S - T - 1, dim1=-2, dim2=-1).sum(dim=-1).mean(dim=0) / T  # (H,)


PREVIOUS = Exercise(
    exercise_id="13.1",
    title="the previous-token score of every head: mean weight on key t - 1",
    function_name="previous_token_score",
    arg_names=("weights",),
    reference=lambda weights: interp.previous_token_score(weights),
    make_cases=_previous_cases,
    mistakes=(
        Mistake(
            lambda weights: _diagonal_mean(weights, 0),
            "this is the weight on the query's own token (the diagonal); the previous token is one "
            "key further left, the sub-diagonal: key position - 1.",
        ),
        Mistake(
            lambda weights: _diagonal_mean(weights, 1, shift=0),
            "the diagonal is aligned top-left: with S > T keys (a cache) query t sits at position "
            "S - T + t, so its previous token is key S - T + t - 1 (diagonal offset S - T - 1).",
        ),
        Mistake(
            _over_all_queries,
            "the mean counts a query that has no previous token (the first one, when T equals S): "
            "average only over the queries that have a key one position back.",
        ),
        Mistake(
            _sum_over_queries,
            "the weights are summed over the queries, not averaged: a score is a mean weight, "
            "between 0 and 1.",
        ),
    ),
    hints=(
        "query t sits at absolute position S - T + t; its previous token is the key one position earlier.",
        "those weights lie on one diagonal of each (T, S) map, the one shifted S - T - 1 keys right of "
        "the main diagonal, with one entry per query that has a previous token; PyTorch can take a "
        "diagonal with an offset over the last two dims.",
        "a sketch: weights.diagonal(offset=S - T - 1, dim1=-2, dim2=-1) comes back as the last dim, (B, "
        "H, queries): average over the batch and over those queries together, leaving one number per "
        "head.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 13.2 induction score


def _induction_cases(g: torch.Generator) -> list[Case]:
    def pattern(B: int, H: int, T: int, period: int, heads: tuple[int, ...]) -> torch.Tensor:
        w = _causal_pattern(g, B, H, T, T)
        for h in heads:
            w = _plant(w, h, period - 1, 0.7)  # an induction stripe: key t - period + 1
        return w

    return [
        Case((pattern(2, 3, 13, 5, (1,)), 5)),
        Case((pattern(1, 5, 16, 8, (0, 4)), 8)),  # two exact copies of 8 tokens
        Case((pattern(3, 1, 11, 4, ()), 4)),
        Case((pattern(2, 3, 20, 7, (2,)), 7)),
        Case((pattern(1, 4, 9, 2, (3,)), 2)),
    ]


def _induction_at(weights: torch.Tensor, period: int, distance: int, first_query: int) -> torch.Tensor:
    return (
        weights[..., first_query:, :]
        .diagonal(offset=first_query - distance, dim1=-2, dim2=-1)
        .mean(dim=(0, 2))
    )


def _induction_over_all_queries(weights: torch.Tensor, period: int) -> torch.Tensor:
    T = weights.shape[-1]
    diagonal = weights.diagonal(offset=-(period - 1), dim1=-2, dim2=-1)[..., 1:]  # queries t >= period
    return diagonal.sum(dim=-1).mean(dim=0) / T  # (H,)


INDUCTION = Exercise(
    exercise_id="13.2",
    title="the induction score of every head: mean weight on key t - period + 1 for t >= period",
    function_name="induction_score",
    arg_names=("weights", "period"),
    reference=lambda weights, period: interp.induction_score(weights, period),
    make_cases=_induction_cases,
    mistakes=(
        Mistake(
            lambda weights, period: _induction_at(weights, period, period, period),
            "off by one: this is the weight on the previous occurrence of the current token (key "
            "t - period), a duplicate-token pattern. An induction head attends to the token *after* "
            "it, key t - period + 1, because that is the token to predict next.",
        ),
        Mistake(
            lambda weights, period: _induction_at(weights, period, period - 1, period - 1),
            "the mean includes query period - 1, the last token of the first copy: nothing has "
            "repeated yet there. Count the queries t >= period only.",
        ),
        Mistake(
            _induction_over_all_queries,
            "the sum is divided by all T queries; the score is the mean over the queries that can "
            "repeat, t >= period (T - period of them).",
        ),
        Mistake(
            lambda weights, period: _induction_at(weights, period, period - 2, period),
            "off by one the other way: key t - period + 2 is two tokens after the previous "
            "occurrence; the induction target is key t - period + 1.",
        ),
    ),
    hints=(
        "in x_1 .. x_P x_1 .. x_P, query t (t >= P) holds the same token as position t - P; the "
        "token that followed it sits at t - P + 1.",
        "keep only the queries t ≥ period first (the ones after the first copy); in that slice the "
        "target key of each query sits period - 1 positions left of the original diagonal, which is one "
        "diagonal of the sliced map.",
        "a sketch: weights[..., period:, :].diagonal(offset=1, dim1=-2, dim2=-1): in the slice, query i "
        "is position period + i and its target key is i + 1, a diagonal just above the main one. Average "
        "it over the batch and the queries, as for the previous-token score.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 13.3 ablate one head


def _ablation_cases(g: torch.Generator) -> list[Case]:
    def case(B: int, H: int, T: int, D: int, head: int) -> Case:
        C = H * D
        heads = torch.randn(B, H, T, D, generator=g)  # (B, H, T, D)
        weight = torch.randn(C, C, generator=g) / C**0.5  # (C, H·D): W^O
        bias = torch.randn(C, generator=g)  # (C,)
        return Case((heads, weight, bias, head))

    return [
        case(2, 3, 5, 4, 1),
        case(1, 5, 7, 2, 4),
        case(3, 4, 6, 3, 0),
        case(2, 7, 3, 5, 2),
        case(1, 3, 9, 6, 2),
    ]


def _ablation_reference(
    head_outputs: torch.Tensor, out_weight: torch.Tensor, out_bias: torch.Tensor, head: int
) -> torch.Tensor:
    B, H, T, D = head_outputs.shape
    attn = MultiHeadAttention(H * D, H)
    gate = torch.ones(H)
    gate[head] = 0.0
    with torch.no_grad():
        attn.out_proj.weight.copy_(out_weight)
        attn.out_proj.bias.copy_(out_bias)
        with interp.gate_heads(attn, gate):
            return attn.out_proj(merge_heads(head_outputs))  # (B, T, C)


def _zero_channels(
    merged: torch.Tensor, out_weight: torch.Tensor, out_bias: torch.Tensor | None, keep: torch.Tensor
) -> torch.Tensor:
    out = (merged * keep) @ out_weight.T  # (B, T, C)
    return out if out_bias is None else out + out_bias


def _block_keep(H: int, D: int, head: int) -> torch.Tensor:
    keep = torch.ones(H, D)
    keep[head] = 0.0
    return keep.flatten()  # (H·D,) head h owns channels h·D .. (h+1)·D - 1


def _strided(heads: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, head: int) -> torch.Tensor:
    B, H, T, D = heads.shape
    keep = torch.ones(H * D)
    keep[head::H] = 0.0  # every H-th channel: the wrong layout
    return _zero_channels(merge_heads(heads), weight, bias, keep)


def _no_transpose(heads: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, head: int) -> torch.Tensor:
    B, H, T, D = heads.shape
    merged = heads.reshape(B, T, H * D)  # (B, T, H·D) without moving the heads next to D: scrambled
    return _zero_channels(merged, weight, bias, _block_keep(H, D, head))


def _without_bias(heads: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, head: int) -> torch.Tensor:
    B, H, T, D = heads.shape
    return _zero_channels(merge_heads(heads), weight, None, _block_keep(H, D, head))


def _rescaled(heads: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, head: int) -> torch.Tensor:
    B, H, T, D = heads.shape
    keep = _block_keep(H, D, head) * H / (H - 1) if H > 1 else _block_keep(H, D, head)
    return _zero_channels(merge_heads(heads), weight, bias, keep)


def _after_projection(
    heads: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, head: int
) -> torch.Tensor:
    B, H, T, D = heads.shape
    out = merge_heads(heads) @ weight.T + bias  # (B, T, C)
    return out * _block_keep(H, D, head)  # zeroes output channels, after the heads were mixed


ABLATION = Exercise(
    exercise_id="13.3",
    kind="build",
    title="the attention block's output with one head's output zeroed before W^O",
    function_name="ablate_head",
    arg_names=("head_outputs", "out_weight", "out_bias", "head"),
    reference=_ablation_reference,
    make_cases=_ablation_cases,
    mistakes=(
        Mistake(
            _strided,
            "the wrong channels were zeroed: after merging, head h owns the D consecutive channels "
            "h*D .. (h+1)*D - 1, not every H-th channel.",
        ),
        Mistake(
            _no_transpose,
            "the heads were merged with a plain reshape of (B, H, T, D): that mixes positions and heads. "
            "Move the heads next to D first, to (B, T, H, D), then flatten to (B, T, H·D).",
        ),
        Mistake(
            _after_projection,
            "the channels were zeroed after W^O: by then every output channel mixes all heads. "
            "Zero the head's slice of the concatenated heads, then apply W^O.",
        ),
        Mistake(
            _without_bias,
            "the bias of W^O is missing: ablation removes one head's contribution, not the "
            "projection's bias (it does not belong to any head).",
        ),
        Mistake(
            _rescaled,
            "the remaining heads were scaled by H/(H-1) as in dropout; ablation leaves them as they are.",
        ),
    ),
    hints=(
        "merge the heads into (B, T, H·D) the way multi-head attention does, zero the chosen head's D "
        "channels, then apply the output projection (weight and bias) as usual.",
        "head h owns the D consecutive channels h·D .. (h+1)·D - 1 of the merged tensor (heads moved "
        "next to D, then flattened). Zero a copy, not the caller's tensor, and apply the projection like "
        "a linear layer: the weight transposed, plus the bias.",
        "a sketch: merged = head_outputs.transpose(1, 2).reshape(B, T, H * D).clone(); merged[..., head "
        "* D:(head + 1) * D] = 0; then apply the output projection, merged @ out_weight.T plus the bias.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 13.4 pruning schedule


def _pruning_cases(g: torch.Generator) -> list[Case]:
    tied = torch.randn(3, 5, generator=g)
    tied[0, 3] = tied[2, 1] = tied[1, 0] = 0.0  # three heads that do nothing: a tie
    tied[1, 4] = tied[0, 2]  # and one more tie, across layers
    signed = torch.randn(4, 3, generator=g)
    signed[2, 2] = -2.5  # a head whose removal helps: it goes first
    return [
        Case((torch.rand(2, 4, generator=g),)),
        Case((tied,)),
        Case((signed,)),
        Case((torch.randn(1, 7, generator=g),)),
        Case((torch.tensor([[0.5, 0.0, 0.5], [0.0, 0.5, 0.0]]),)),  # ties only
    ]


def _in_order(importance: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    return interp.head_masks_in_order(order, *importance.shape)  # (L·H + 1, L, H)


def _column_major(importance: torch.Tensor) -> torch.Tensor:
    L, H = importance.shape
    by_head = torch.argsort(importance.T.flatten(), stable=True)  # flat index = head·L + layer
    return _in_order(importance, (by_head % L) * H + by_head // L)


PRUNING = Exercise(
    exercise_id="13.4",
    title="head masks that remove heads one by one, least important first",
    function_name="pruning_masks",
    arg_names=("importance",),
    reference=lambda importance: interp.pruning_masks(importance),
    make_cases=_pruning_cases,
    mistakes=(
        Mistake(
            lambda importance: _in_order(importance, torch.argsort(-importance.flatten(), stable=True)),
            "the most important heads are removed first; a pruning schedule removes the head whose "
            "loss (importance) is smallest first: sort in increasing order.",
        ),
        Mistake(
            lambda importance: _in_order(importance, torch.argsort(importance.abs().flatten(), stable=True)),
            "the order uses |importance|: a negative importance means the model does better without "
            "that head, so it should go first, not after the heads near zero.",
        ),
        Mistake(
            lambda importance: interp.pruning_masks(importance)[1:],
            "the first mask (no head removed, all ones) is missing: the schedule has L*H + 1 rows, "
            "from the full model to no heads at all.",
        ),
        Mistake(
            _column_major,
            "ties are broken head by head across layers; keep the (layer, head) order of the flattened "
            "table, with a sort that keeps equal values in their original order.",
        ),
    ),
    hints=(
        "order the L*H heads by importance, smallest first (flatten the (L, H) table), then switch "
        "them off one at a time.",
        "sort the flattened (L·H,) importances with a stable sort, so that tied heads keep their (layer, "
        "head) order; row k of the answer has the first k heads of that order set to 0.",
        "a sketch: order = torch.argsort(importance.flatten(), stable=True); start from all ones, one "
        "row per step and one column per head; the head removed at step k is off in row k and in every "
        "later row. Reshape the columns back to (L, H) at the end.",
    ),
    difficulty=2,
    minutes=15,
)


# ---------------------------------------------------------------------------------------------------------
# 13.5 the copying score of a head's full OV circuit (measure)


def _planted(g: torch.Generator, V: int, pairs: list, orthonormal: bool = False) -> Case:
    """w_ov, w_e, w_u whose full OV circuit has known nonzero eigenvalues: those of ``w_ov A = R``, with
    ``A = w_uᵀ w_e`` and ``R`` block triangular, a (2, 2) block per pair: reals ``(d1, d2)``, or ``z, z̄`` as
    ``[[a, -b], [b, a]]``. ``orthonormal``: ``w_e = w_u``, ``A = I``; else ``w_ov``'s own eigenvalues differ."""
    blocks = [
        [[z.real, -z.imag], [z.imag, z.real]] if isinstance(z, complex) else [[z[0], 0], [0, z[1]]]
        for z in pairs
    ]
    C, f64 = 2 * len(pairs), {"generator": g, "dtype": torch.float64}
    R = torch.randn(C, C, **f64).triu(diagonal=2) + torch.block_diag(*map(torch.tensor, blocks)).double()
    w_e, w_u = (torch.randn(V, C, **f64) for _ in range(2))  # (V, C) each; R (C, C)
    w_e, w_u = (torch.linalg.qr(w_e)[0],) * 2 if orthonormal else (w_e, w_u)  # orthonormal: w_uᵀ w_e = I
    w_ov = R @ torch.linalg.inv(w_u.T @ w_e)  # (C, C)
    return Case((w_ov.float(), w_e.float(), w_u.float()), group="known eigenvalues")


def _copying_cases(g: torch.Generator) -> list[Case]:
    random = lambda V, C: Case(tuple(torch.randn(*shape, generator=g) for shape in ((C, C), (V, C), (V, C))))
    with torch.random.fork_rng():  # an untrained toy model of notebook 13's kind, seeded from g
        torch.manual_seed(int(torch.randint(2**31, (1,), generator=g)))
        toy = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=29, embed_dim=12, num_heads=3))
    toy_weights = (head_circuits(toy.layers[1])[1][2], toy.token_embedding.weight, toy.unembed.weight)
    return [
        *(random(V, C) for V, C in ((11, 6), (7, 7), (5, 9), (23, 8))),  # w_ov (C, C), w_e and w_u (V, C)
        Case(tuple(w.detach().clone() for w in toy_weights)),  # layer 1's head 2: w_ov of rank D = 4
        _planted(g, 9, [(2.0, 1.5), (0.5, 3.0)]),  # a copier: every eigenvalue positive
        _planted(g, 10, [(-1.0, -2.5), (-0.3, -0.8)]),  # an anti-copier
        _planted(g, 12, [(3.0, -1.0), 0.5 + 1j, (2.0, 0.0)]),  # mixed signs and a pair 0.5 ± i
        _planted(g, 7, [(1.0, -2.0), -1.0 + 2j], orthonormal=True),
        _planted(g, 13, [(0.2, 4.0), 1.5j, (-3.0, 1.0), (-0.7, 0.4)]),  # ± 1.5i adds to Σ |λ| only
    ]


def _planted_ratio_agrees(case: Case, output: torch.Tensor) -> str | None:
    """Σ Re λ / Σ |λ| read off the planted (2, 2) blocks of ``w_ov w_uᵀ w_e``, no eigensolver."""
    w_ov, w_e, w_u = (x.double() for x in case.args)
    R, moduli = w_ov @ (w_u.T @ w_e), 0.0  # (C, C): the planted block triangular matrix
    for i in range(0, R.shape[0], 2):
        mean, det = float(R[i : i + 2, i : i + 2].trace()) / 2, float(R[i : i + 2, i : i + 2].det())
        root = complex(mean**2 - det) ** 0.5  # the block's eigenvalues are mean ± root
        moduli += abs(mean + root) + abs(mean - root)
    want, got = float(R.trace()) / moduli, float(output)  # the trace is Σ λ, real
    if abs(got - want) > 1e-4 + 1e-3 * abs(want):
        return f"the planted eigenvalues give Σ Re λ / Σ |λ| = {want:.4f}, the answer says {got:.4f}"
    return None


COPYING_SCORE = Exercise(
    exercise_id="13.5",
    kind="measure",
    title="the copying score Σ Re λ / Σ |λ| of a head's full OV circuit w_e w_ov w_uᵀ (V, V)",
    function_name="copying_score",
    arg_names=("w_ov", "w_e", "w_u"),
    reference=lambda w_ov, w_e, w_u: circuits.copying_score(w_e @ w_ov @ w_u.T),  # full circuit (V, V)
    make_cases=_copying_cases,
    mistakes=(
        Mistake(
            lambda w_ov, w_e, w_u: torch.trace(w_e @ w_ov @ w_u.T),
            "this is the trace, Σ λ: it grows with the weights' scale. Divide by Σ |λ| so that the score "
            "lies between -1 (suppresses the token) and +1 (copies it).",
        ),
        Mistake(
            lambda w_ov, w_e, w_u: torch.ones(()),
            "every head scores 1: the numerator takes |λ| too. Sum the real parts Re λ on top.",
        ),
        Mistake(
            lambda w_ov, w_e, w_u: circuits.copying_score(w_ov),
            "these are the eigenvalues of w_ov alone (C, C): the copying score is about tokens, so take "
            "those of the full (V, V) circuit, embedding and unembedding included.",
        ),
        Mistake(
            lambda w_ov, w_e, w_u: circuits.copying_score(w_u @ w_ov @ w_e.T),
            "the circuit is multiplied in the wrong order: with row vectors a token's embedding row goes "
            "through w_ov, then the transposed unembedding (the paper's W_U W_OV W_E is the transpose of "
            "that).",
        ),
    ),
    properties=(
        Property(
            "known eigenvalues",
            "on circuits built with known eigenvalues λ (real ones and complex pairs) the answer must be "
            "Σ Re λ / Σ |λ| of exactly those: the eigenvalues of the full (V, V) circuit, real parts "
            "summed on top.",
            holds=_planted_ratio_agrees,
        ),
    ),
    hints=(
        "build the full OV circuit first: a token's embedding row goes through w_ov, then the unembedding, "
        "giving a (V, V) matrix whose row a is the logits added when the head attends to token a.",
        "its V eigenvalues are complex in general (some come in conjugate pairs), and PyTorch's "
        "linear-algebra module computes them; the score compares the sum of their real parts with the "
        "sum of their moduli.",
        "a sketch: lam = torch.linalg.eigvals(w_e @ w_ov @ w_u.T); sum lam.real and lam.abs() and "
        "divide; eigvals of a float32 matrix is complex64, so the ratio is a float32 0-d tensor, the "
        "inputs' dtype.",
    ),
    difficulty=2,
    minutes=10,
    atol=1e-4,
    rtol=1e-3,
)


EXERCISES = (PREVIOUS, INDUCTION, ABLATION, PRUNING, COPYING_SCORE)
