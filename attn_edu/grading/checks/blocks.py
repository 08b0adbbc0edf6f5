"""Checks for notebook 08's exercises: RMSNorm, a pre-norm block, a post-norm block, the SwiGLU FFN, and 08.6,
a measurement: the length at which a block's T² FLOPs overtake the rest, verified by PyTorch's FlopCounterMode
on a real block (the GPT-2 block of exercise 08.5 is in :mod:`attn_edu.grading.checks.gpt2`).

Each exercise runs the learner's function on random cases (sizes that are not powers of two, odd head
counts, inputs far from zero mean and unit scale) and compares it with :mod:`attn_edu.blocks`. The
known-wrong versions are the usual slips (the norm on the wrong side of the residual, the mean left in, the
gate and the up projection swapped, the projections left out of a FLOP count), so a check can name them.

The grading command sends a learner's function only tensors and numbers, so the block exercises receive
``num_heads`` and a ``seed`` and rebuild the reference's sub-layers with :func:`toy_sublayers`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from attn_edu._validate import check_positive_int
from attn_edu.blocks import (
    FeedForward,
    PostNormEncoderBlock,
    PreNormEncoderBlock,
    RMSNorm,
    SwiGLUFeedForward,
    block_flops,
)
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property, Question
from attn_edu.multihead import MultiHeadAttention

# ---------------------------------------------------------------------------------------------------------
# 08.1 RMSNorm


def _rms_cases(g: torch.Generator) -> list[Case]:
    def rand(*shape: int, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
        return scale * torch.randn(*shape, generator=g) + offset

    def gain(C: int) -> torch.Tensor:
        return 1.0 + 0.5 * torch.randn(C, generator=g)  # not all ones: a forgotten gain shows

    with_zero_token = rand(2, 5, 6)
    with_zero_token[1, 2] = 0.0  # a token of zeros: mean(x²) = 0, only eps keeps it finite
    return [
        Case((rand(2, 5, 12, scale=2.0, offset=1.0), gain(12), 1e-6)),  # a mean far from 0: not LayerNorm
        Case((rand(3, 7, 9, offset=-0.5), gain(9), 1e-5)),
        Case((rand(4, 10, scale=0.1), gain(10), 1e-2)),  # (T, C); eps comparable to mean(x²)
        Case((rand(1, 6, 3, 20, scale=1e-3), gain(20), 1e-6)),  # tiny values: eps matters
        Case((with_zero_token, gain(6), 1e-6)),
    ]


def _rms_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    norm = RMSNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm(x).detach()  # (..., C)


def _mean_square(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x.pow(2).mean(dim=dim, keepdim=True)


RMS_NORM = Exercise(
    exercise_id="08.1",
    title="RMSNorm: x / sqrt(mean(x²) + eps) · weight over the last dim",
    function_name="rms_norm",
    arg_names=("x", "weight", "eps"),
    reference=_rms_reference,
    make_cases=_rms_cases,
    mistakes=(
        Mistake(
            lambda x, w, eps: (
                (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps) * w
            ),
            "the mean is subtracted: that is LayerNorm (without a bias). RMSNorm divides x itself by "
            "its root mean square, with no centring.",
        ),
        Mistake(
            lambda x, w, eps: x / torch.sqrt(_mean_square(x) + eps),
            "the gain is missing: multiply the normalised x by weight (one number per channel).",
        ),
        Mistake(
            lambda x, w, eps: x / torch.sqrt(_mean_square(x)) * w,
            "eps is missing: a token whose values are all (nearly) 0 divides by (nearly) 0. "
            "Add eps inside the square root: sqrt(mean(x²) + eps).",
        ),
        Mistake(
            lambda x, w, eps: x / (torch.sqrt(_mean_square(x)) + eps) * w,
            "eps is added outside the square root; RMSNorm adds it to the mean square: sqrt(mean(x²) + eps).",
        ),
        Mistake(
            lambda x, w, eps: x / (_mean_square(x) + eps) * w,
            "the square root is missing: divide by the root mean square sqrt(mean(x²) + eps), not "
            "by the mean square.",
        ),
        Mistake(
            lambda x, w, eps: x / torch.sqrt(_mean_square(x, dim=-2) + eps) * w,
            "the mean runs over the tokens (dim=-2); each token is normalised over its own channels: "
            "mean over dim=-1 with keepdim=True.",
        ),
        Mistake(
            lambda x, w, eps: x / torch.sqrt(_mean_square(x, dim=0) + eps) * w,
            "the mean runs over dim 0 (across the batch, like BatchNorm); each token is normalised "
            "over its own channels: mean over dim=-1 with keepdim=True.",
        ),
    ),
    hints=(
        "one statistic per token: the mean of x² over the last dim (keepdim=True, so it broadcasts).",
        "add eps to that mean square *before* the square root, so an all-zero token gives 0, not NaN; "
        "no mean is subtracted.",
        "divide x by the root of (mean square + eps), or multiply by torch.rsqrt of it, then multiply "
        "by the gain, which broadcasts over the channels.",
    ),
    difficulty=1,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# Sub-layers for the block exercises


class Sublayers(NamedTuple):
    """The four parts a block is assembled from (unpack as ``attn, ffn, attn_norm, ffn_norm``)."""

    attn: MultiHeadAttention  # self-attention, called as attn(x)
    ffn: FeedForward  # position-wise FFN, called as ffn(x)
    attn_norm: nn.LayerNorm  # the norm that belongs to the attention sub-layer
    ffn_norm: nn.LayerNorm  # the norm that belongs to the FFN sub-layer


def toy_sublayers(dim: int, num_heads: int, seed: int) -> Sublayers:
    """Small, seeded sub-layers for one block: multi-head attention, a GELU FFN and two LayerNorms.

    The same ``(dim, num_heads, seed)`` always gives the same weights, in any process. The norms get
    random gains and biases (not PyTorch's 1 and 0), different for the two norms, so a norm used in the
    wrong place changes the output. The caller's random state is left as it was.

    Example:
        >>> attn, ffn, attn_norm, ffn_norm = toy_sublayers(12, 3, seed=0)
        >>> x = torch.randn(2, 5, 12)
        >>> (x + attn(attn_norm(x))).shape
        torch.Size([2, 5, 12])
        >>> torch.equal(toy_sublayers(12, 3, seed=0).ffn_norm.bias, ffn_norm.bias)
        True
    """
    check_positive_int("dim", dim)
    check_positive_int("num_heads", num_heads)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        attn = MultiHeadAttention(dim, num_heads)
        ffn = FeedForward(dim, 3 * dim, activation="gelu")
        norms = [nn.LayerNorm(dim), nn.LayerNorm(dim)]
        with torch.no_grad():
            for norm in norms:
                norm.weight.copy_(1.0 + 0.5 * torch.randn(dim))
                norm.bias.copy_(0.5 * torch.randn(dim))
    return Sublayers(attn, ffn, *norms)


def _block_cases(g: torch.Generator) -> list[Case]:
    def x(B: int, T: int, C: int) -> torch.Tensor:
        return 2.0 * torch.randn(B, T, C, generator=g) + 0.5  # not zero-mean, not unit-scale

    def seed() -> int:
        return int(torch.randint(0, 10_000, (1,), generator=g))

    return [
        Case((x(2, 5, 12), 3, seed())),  # D = 4
        Case((x(1, 7, 15), 5, seed())),  # D = 3
        Case((x(3, 4, 21), 7, seed())),  # D = 3
        Case((x(2, 6, 10), 1, seed())),  # one head
        Case((x(1, 9, 18), 3, seed())),
    ]


def _parts(x: torch.Tensor, num_heads: int, seed: int) -> Sublayers:
    return toy_sublayers(x.shape[-1], num_heads, seed)


def _pre_norm_reference(x: torch.Tensor, num_heads: int, seed: int) -> torch.Tensor:
    return PreNormEncoderBlock(*_parts(x, num_heads, seed))(x).detach()  # (B, T, C)


def _post_norm_reference(x: torch.Tensor, num_heads: int, seed: int) -> torch.Tensor:
    return PostNormEncoderBlock(*_parts(x, num_heads, seed))(x).detach()  # (B, T, C)


# ---------------------------------------------------------------------------------------------------------
# 08.2 a pre-norm block


def _pre_normalised_skip(x: torch.Tensor, num_heads: int, seed: int) -> torch.Tensor:
    attn, ffn, attn_norm, ffn_norm = _parts(x, num_heads, seed)
    h = attn_norm(x)
    x = h + attn(h)  # the skip carries the normalised x
    h = ffn_norm(x)
    return (h + ffn(h)).detach()


def _pre_swapped_norms(x: torch.Tensor, num_heads: int, seed: int) -> torch.Tensor:
    attn, ffn, attn_norm, ffn_norm = _parts(x, num_heads, seed)
    x = x + attn(ffn_norm(x))
    return (x + ffn(attn_norm(x))).detach()


def _pre_no_residual(x: torch.Tensor, num_heads: int, seed: int) -> torch.Tensor:
    attn, ffn, attn_norm, ffn_norm = _parts(x, num_heads, seed)
    return ffn(ffn_norm(attn(attn_norm(x)))).detach()


def _pre_parallel(x: torch.Tensor, num_heads: int, seed: int) -> torch.Tensor:
    attn, ffn, attn_norm, ffn_norm = _parts(x, num_heads, seed)
    return (x + attn(attn_norm(x)) + ffn(ffn_norm(x))).detach()


PRE_NORM_BLOCK = Exercise(
    exercise_id="08.2",
    title="a pre-norm block: x + attn(attn_norm(x)), then x + ffn(ffn_norm(x))",
    function_name="pre_norm_block",
    arg_names=("x", "num_heads", "seed"),
    reference=_pre_norm_reference,
    make_cases=_block_cases,
    mistakes=(
        Mistake(
            _post_norm_reference,
            "the norm comes after the residual sum: that is post-norm, norm(x + attn(x)). Pre-norm "
            "normalises only the sub-layer's input and adds its output to the raw x: "
            "x + attn(attn_norm(x)).",
        ),
        Mistake(
            _pre_normalised_skip,
            "the skip connection carries the normalised x (h + attn(h) with h = attn_norm(x)); it "
            "must carry x itself: x + attn(attn_norm(x)). Only the sub-layer sees the norm.",
        ),
        Mistake(
            _pre_swapped_norms,
            "the norms are swapped: attn_norm belongs in front of attention, ffn_norm in front of the FFN.",
        ),
        Mistake(
            _pre_no_residual,
            "there are no residual additions: each sub-layer's output must be added to its input, "
            "x = x + attn(attn_norm(x)), then x = x + ffn(ffn_norm(x)).",
        ),
        Mistake(
            _pre_parallel,
            "attention and the FFN both read the block's input (a 'parallel' block, as in GPT-J); "
            "here the FFN reads the stream *after* attention was added: update x first.",
        ),
    ),
    hints=(
        "two residual steps in a row; in each, only the sub-layer's input is normalised.",
        "the attention step first: run attn on attn_norm of x and add the result to x itself; the FFN "
        "step then reads this updated x.",
        "the FFN step has the same shape as the attention step, with ffn_norm and ffn in place of "
        "attn_norm and attn; both times the skip path carries x unnormalised.",
    ),
    difficulty=1,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 08.3 a post-norm block


def _post_norm_inside(x: torch.Tensor, num_heads: int, seed: int) -> torch.Tensor:
    attn, ffn, attn_norm, ffn_norm = _parts(x, num_heads, seed)
    x = x + attn_norm(attn(x))  # the norm before the residual sum
    return (x + ffn_norm(ffn(x))).detach()


def _post_no_last_norm(x: torch.Tensor, num_heads: int, seed: int) -> torch.Tensor:
    attn, ffn, attn_norm, ffn_norm = _parts(x, num_heads, seed)
    x = attn_norm(x + attn(x))
    return (x + ffn(x)).detach()


def _post_swapped_norms(x: torch.Tensor, num_heads: int, seed: int) -> torch.Tensor:
    attn, ffn, attn_norm, ffn_norm = _parts(x, num_heads, seed)
    x = ffn_norm(x + attn(x))
    return attn_norm(x + ffn(x)).detach()


def _post_no_residual(x: torch.Tensor, num_heads: int, seed: int) -> torch.Tensor:
    attn, ffn, attn_norm, ffn_norm = _parts(x, num_heads, seed)
    return ffn_norm(ffn(attn_norm(attn(x)))).detach()


POST_NORM_BLOCK = Exercise(
    exercise_id="08.3",
    title="a post-norm block: attn_norm(x + attn(x)), then ffn_norm(x + ffn(x))",
    function_name="post_norm_block",
    arg_names=("x", "num_heads", "seed"),
    reference=_post_norm_reference,
    make_cases=_block_cases,
    mistakes=(
        Mistake(
            _pre_norm_reference,
            "that is pre-norm, x + attn(attn_norm(x)). Post-norm runs the sub-layer on x as it is "
            "and normalises the sum: attn_norm(x + attn(x)).",
        ),
        Mistake(
            _post_norm_inside,
            "the norm is applied to the sub-layer's output before the residual, x + norm(attn(x)); "
            "post-norm normalises after the addition: attn_norm(x + attn(x)).",
        ),
        Mistake(
            _post_no_last_norm,
            "the second sum is not normalised: the block must end with ffn_norm(x + ffn(x)), so "
            "its output is a LayerNorm output.",
        ),
        Mistake(
            _post_swapped_norms,
            "the norms are swapped: attn_norm normalises the sum after attention, ffn_norm the sum "
            "after the FFN.",
        ),
        Mistake(
            _post_no_residual,
            "there are no residual additions: normalise x + attn(x), not attn(x) alone (and the same "
            "for the FFN).",
        ),
    ),
    hints=(
        "two steps; in each, add the sub-layer's output to its input, then normalise the sum.",
        "the attention step first: add attn(x) to x and pass the sum through attn_norm; the FFN step "
        "reads the result.",
        "the FFN step mirrors it with ffn and ffn_norm: the block ends with a norm, and nothing is "
        "added after it.",
    ),
    difficulty=1,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 08.4 SwiGLU feed-forward network


def _swiglu_cases(g: torch.Generator) -> list[Case]:
    def weights(C: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (
            torch.randn(hidden, C, generator=g) / C**0.5,  # w_gate (hidden, C), nn.Linear layout
            torch.randn(hidden, C, generator=g) / C**0.5,  # w_up (hidden, C)
            torch.randn(C, hidden, generator=g) / hidden**0.5,  # w_down (C, hidden)
        )

    def x(*shape: int) -> torch.Tensor:
        return 1.5 * torch.randn(*shape, generator=g)

    return [
        Case((x(2, 5, 12), *weights(12, 32))),
        Case((x(1, 7, 9), *weights(9, 24))),  # hidden = 2/3 · 4C
        Case((x(3, 4, 16), *weights(16, 40))),
        Case((x(6, 10), *weights(10, 7))),  # (T, C); hidden < C
        Case((x(2, 3, 5, 15), *weights(15, 40))),
    ]


def _swiglu_reference(
    x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor
) -> torch.Tensor:
    hidden, C = w_gate.shape
    ffn = SwiGLUFeedForward(C, hidden)
    with torch.no_grad():
        ffn.gate_proj.weight.copy_(w_gate)
        ffn.up_proj.weight.copy_(w_up)
        ffn.down_proj.weight.copy_(w_down)
    return ffn(x).detach()  # (..., C)


def _glu(
    act, x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor
) -> torch.Tensor:
    return (act(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T  # (..., C)


SWIGLU = Exercise(
    exercise_id="08.4",
    title="the SwiGLU FFN: (silu(x W_gateᵀ) ⊙ x W_upᵀ) W_downᵀ",
    function_name="swiglu_ffn",
    arg_names=("x", "w_gate", "w_up", "w_down"),
    reference=_swiglu_reference,
    make_cases=_swiglu_cases,
    mistakes=(
        Mistake(
            lambda x, wg, wu, wd: _glu(nn.functional.silu, x, wu, wg, wd),
            "the gate and the up projection are swapped: SiLU goes on x @ w_gate.T, and x @ w_up.T "
            "passes through unchanged.",
        ),
        Mistake(
            lambda x, wg, wu, wd: _glu(torch.sigmoid, x, wg, wu, wd),
            "the gate uses sigmoid(z); Swish/SiLU is z · sigmoid(z) (torch.nn.functional.silu). "
            "A plain sigmoid gate is the original GLU.",
        ),
        Mistake(
            lambda x, wg, wu, wd: _glu(nn.functional.gelu, x, wg, wu, wd),
            "the gate uses GELU (that is GEGLU); SwiGLU's gate is SiLU: torch.nn.functional.silu.",
        ),
        Mistake(
            lambda x, wg, wu, wd: _glu(torch.relu, x, wg, wu, wd),
            "the gate uses ReLU (that is ReGLU); SwiGLU's gate is SiLU: torch.nn.functional.silu.",
        ),
        Mistake(
            lambda x, wg, wu, wd: nn.functional.silu((x @ wg.T) * (x @ wu.T)) @ wd.T,
            "SiLU is applied to the product; apply it to the gate projection only, then multiply: "
            "silu(x @ w_gate.T) * (x @ w_up.T).",
        ),
        Mistake(
            lambda x, wg, wu, wd: _glu(nn.functional.silu, x, wg, wg, wd),
            "both branches use w_gate; the second branch is x @ w_up.T.",
        ),
    ),
    hints=(
        "three matrices in nn.Linear layout (out, in): project with x @ w.T. Two projections to the "
        "hidden width, one back to C.",
        "only the gate branch goes through SiLU (torch.nn.functional.silu); the up branch does not. "
        "Both are (..., hidden) and are multiplied elementwise.",
        "project that product back to C with w_down, transposed as well because of the (out, in) layout.",
    ),
    difficulty=1,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 08.6 the crossover length, measured by FlopCounterMode on a block of attn_edu.blocks


def counted_block_flops(d_model: int, d_ff: int, T: int) -> tuple[int, int]:
    """``(q kᵀ and P v, the rest)``: the FLOPs FlopCounterMode counts in a pre-norm block (GELU FFN of width
    ``d_ff``) on one sequence of ``T >= 1`` tokens: bmm (the attention core) against mm/addmm (the rest)."""
    from torch.utils.flop_counter import FlopCounterMode  # imports triton: not when the grader is imported

    with torch.random.fork_rng(devices=[]), torch.no_grad(), FlopCounterMode(display=False) as counter:
        attn = MultiHeadAttention(d_model, next(h for h in (3, 2, 1) if d_model % h == 0))  # any heads
        norms = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        PreNormEncoderBlock(attn, FeedForward(d_model, d_ff, "gelu"), *norms)(torch.zeros(1, T, d_model))
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    core = sum(n for op, n in counts.items() if "bmm" in op or "scaled_dot_product" in op)
    return core, sum(counts.values()) - core


def _crossover_holds(case: Case, output: torch.Tensor) -> str | None:
    T = int(output.reshape(()))
    if not 1 <= T <= 2048:
        return f"the answer T = {T} is not a sequence length from 1 to 2,048, where these cases cross"
    for t, too_soon in ((T, False), (T - 1, True)):  # more at T, and not yet at T - 1
        core, rest = counted_block_flops(*case.args, t) if t else (0, 0)  # no tokens, no FLOPs
        if (core > rest) == too_soon:
            return (
                f"at T = {t} FlopCounterMode counts {core:,} FLOPs in q kᵀ and P v, {rest:,} in the projections "
                f"and the FFN: {f'more already, so T = {T} is not the smallest' if too_soon else 'not more yet'}"
            )
    return None


def _crossover(d_model: int, d_ff: int, proj: int = 8, ffn: int = 4, core: int = 4, tie: int = 1):
    per_token, per_pair = proj * d_model**2 + ffn * d_model * d_ff, core * d_model  # FLOPs
    return torch.tensor(per_token // per_pair + tie)  # tie = 0: the first T with T·pair >= token


_CROSSOVER_SLIPS = {  # each slip's message and the terms it changes in the count
    "the four projections are missing: q, k, v and out cost 8·T·d_model² FLOPs together.": {"proj": 0},
    "the FFN is missing: its two products cost 2·T·d_model·d_ff FLOPs each.": {"ffn": 0},
    "the T² side counts a multiply-add once; count 2 FLOPs per multiply-add on both sides: q kᵀ and P v "
    "cost 2·T²·d_model each.": {"core": 2},
    "off by one: at that T both sides tie; the T² terms must cost *more* (>, not >=).": {"tie": 0},
}


def _crossover_cases(g: torch.Generator) -> list[Case]:
    C, F = torch.randint(3, 40, (3,), generator=g).tolist(), torch.randint(5, 300, (3,), generator=g).tolist()
    sizes = [(768, 3072), (12288, 49152), (C[0], F[0]), (C[1], F[1]), (7, 11)]  # GPT-2 small, GPT-3
    measured = [(6, 10), (C[2] // 4 + 3, F[2] // 15 + 5)]  # small: the block runs in milliseconds
    return [Case(s) for s in sizes] + [Case(s, group="counted by FlopCounterMode") for s in measured]


CROSSOVER = Exercise(
    exercise_id="08.6",
    title="the shortest sequence on which a block's T² terms (q kᵀ, P v) cost more FLOPs than the rest",
    function_name="crossover_length",
    arg_names=("d_model", "d_ff"),
    # per token over per (query, key) pair, from the library's count at T = 1; the next integer wins
    reference=lambda C, F: torch.tensor((n := block_flops(1, C, F))["per_token"] // n["attention_core"] + 1),
    make_cases=_crossover_cases,
    mistakes=tuple(Mistake(lambda C, F, k=k: _crossover(C, F, **k), m) for m, k in _CROSSOVER_SLIPS.items()),
    properties=(
        Property(
            "counted by FlopCounterMode",
            "in a real block, q kᵀ and P v must cost more FLOPs than the rest at your T, and not at T - 1.",
            holds=_crossover_holds,
        ),
    ),
    hints=(
        "count one sequence of T tokens, a multiply-add as 2 FLOPs: q kᵀ is (T, d_model) by (d_model, T), "
        "P v (T, T) by (T, d_model), a projection (T, d_model) by (d_model, d_model), the FFN's up and down.",
        "both sides share a factor T: per token, the T² side costs 4·T·d_model, the rest 8·d_model² + "
        "4·d_model·d_ff. For which T is the first strictly larger?",
        "divide the per-token FLOPs by 4·d_model, the FLOPs per (query, key) pair: an integer, at which the "
        "two sides tie; the answer is the next integer, as a tensor.",
    ),
    difficulty=2,
    minutes=15,
    kind="measure",
)


EXERCISES = (RMS_NORM, PRE_NORM_BLOCK, POST_NORM_BLOCK, SWIGLU, CROSSOVER)


# ---------------------------------------------------------------------------------------------------------
# Concept questions

SWIGLU_WIDTH = Question(
    exercise_id="08.q1",
    title="the SwiGLU hidden width with the weights of a 4C FFN, for C = 768 and no biases",
    answer=2048,
    explanation=(
        "the two-matrix FFN holds 2 · C · 4C = 8C² weights; SwiGLU's three C × h matrices hold 3Ch. Equal "
        "counts give h = 8C/3 = 2048 for C = 768: the gate is paid for with a narrower hidden layer."
    ),
    wrong=(
        (
            3072,
            "3072 = 4C is the width of the two-matrix FFN; SwiGLU has three C × hidden matrices, so the same "
            "budget buys a narrower hidden layer.",
        ),
        (
            1536,
            "set the counts equal: 3 · C · h for SwiGLU against 2 · C · 4C for the ReLU FFN, then solve for h.",
        ),
    ),
    hints=(
        "count the weights of each FFN as a function of C and its hidden width (up, down; gate, up, down), "
        "then set the two counts equal.",
    ),
    minutes=3,
)

ZERO_SUBLAYERS = Question(
    exercise_id="08.q2",
    title="what a stack of blocks computes when every sub-layer's last projection is zero",
    choices=(
        "both stacks, pre-norm and post-norm, return their input unchanged",
        "the pre-norm stack returns its input unchanged; the post-norm stack returns it normalised",
        "the post-norm stack returns its input unchanged; the pre-norm stack returns it normalised",
        "both stacks return zeros, since every sub-layer outputs zeros",
    ),
    answer="b",
    explanation=(
        "with out_proj and down_proj at zero (weights and biases) each sub-layer outputs 0. Pre-norm then "
        "computes x + 0 = x in every step, so the whole stack is the identity; post-norm computes norm(x + 0), "
        "so the stack still applies LayerNorm after LayerNorm. Only the pre-norm skip path is a clean identity."
    ),
    wrong=(
        (
            "a",
            "write out one post-norm step with a zero sub-layer: attn_norm(x + 0) is a LayerNorm of x, "
            "not x.",
        ),
        (
            "c",
            "in pre-norm the norm only feeds the sub-layer, whose output is 0 here; the skip path carries x "
            "itself. Which arrangement puts the norm on the skip path?",
        ),
        ("d", "the sub-layers output zeros, but each is added to the residual stream x, which is not zero."),
    ),
    hints=(
        "set attn(...) = ffn(...) = 0 in the two formulas, x + attn(attn_norm(x)) and attn_norm(x + attn(x)).",
    ),
    difficulty=2,
    minutes=3,
)

MIXING_FLOPS = Question(
    exercise_id="08.q3",
    title="attention's token-mixing FLOPs divided by an RNN's, at n = 1024 and d = 128",
    answer=8,
    explanation=(
        "attention mixes tokens in 4n²d FLOPs, an RNN in 4nd²: the ratio is n/d = 1024/128 = 8. More "
        "arithmetic once n > d, but in a few large matrix products that run in parallel, where the RNN's n "
        "steps must run one after another."
    ),
    wrong=(
        (64, "that squares the ratio: 4n²d and 4nd² differ by a single factor of n/d."),
        (
            0.125,
            "that is the RNN's count over attention's; the question asks how many times more attention does.",
        ),
    ),
    hints=("take the two counts from the notebook, 4n²d for attention and 4nd² for the RNN, and divide.",),
    minutes=2,
)

QUESTIONS = (SWIGLU_WIDTH, ZERO_SUBLAYERS, MIXING_FLOPS)
