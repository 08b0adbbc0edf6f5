"""Checks for notebook 08's exercises: RMSNorm, a pre-norm block, a post-norm block, the SwiGLU FFN, and 08.6,
a measurement: the length at which a block's T² FLOPs overtake the rest, verified by PyTorch's FlopCounterMode
on a real block; and 08.5, a GPT-2 block built from Hugging Face's weights and verified against transformers'
GPT2Block (its helpers serve 09.5 too, in :mod:`attn_edu.grading.checks.architectures`); 08.7, gated attention's
output gate, against :class:`attn_edu.gating.OutputGate` (its slips: no sigmoid, the sigmoid after the product, the
gate added).

Each exercise runs the learner's function on random cases (sizes that are not powers of two, odd head
counts, inputs far from zero mean and unit scale) and compares it with :mod:`attn_edu.blocks`. The
known-wrong versions are the usual slips (the norm on the wrong side of the residual, the mean left in, the
gate and the up projection swapped, the projections left out of a FLOP count), so a check can name them.

The grading command sends a learner's function only tensors and numbers, so the block exercises receive
``num_heads`` and a ``seed`` and rebuild the reference's sub-layers with :func:`~attn_edu.grading.given.toy_sublayers`.
"""

from __future__ import annotations

import torch
from torch import nn

from attn_edu import masks
from attn_edu.blocks import (
    FeedForward,
    PostNormEncoderBlock,
    PreNormDecoderBlock,
    PreNormEncoderBlock,
    RMSNorm,
    SwiGLUFeedForward,
    block_flops,
)
from attn_edu.gating import OutputGate
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property
from attn_edu.grading.given import Sublayers, toy_sublayers
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
            "the mean runs over the tokens (the second-to-last dim); each token is normalised over its "
            "own channels, the last dim, keeping that dim so that the statistic broadcasts.",
        ),
        Mistake(
            lambda x, w, eps: x / torch.sqrt(_mean_square(x, dim=0) + eps) * w,
            "the mean runs over dim 0 (across the batch, like BatchNorm); each token is normalised over "
            "its own channels, the last dim, keeping that dim so that the statistic broadcasts.",
        ),
    ),
    hints=(
        "one statistic per token: the mean of x² over the last dim, kept as a dim of size 1 so that it "
        "broadcasts against x.",
        "add eps to that mean square *before* the square root, so an all-zero token gives 0, not NaN; "
        "no mean is subtracted.",
        "divide x by the root of (mean square + eps), or multiply by torch.rsqrt of it, then multiply "
        "by the gain, which broadcasts over the channels.",
    ),
    difficulty=1,
    minutes=5,
)


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
            "the norm comes after the residual sum: that is post-norm. Pre-norm normalises only the "
            "sub-layer's input and adds the sub-layer's output to the raw x.",
        ),
        Mistake(
            _pre_normalised_skip,
            "the skip connection carries the normalised x; it must carry x itself. Only the sub-layer "
            "sees the norm.",
        ),
        Mistake(
            _pre_swapped_norms,
            "the norms are swapped: attn_norm belongs in front of attention, ffn_norm in front of the FFN.",
        ),
        Mistake(
            _pre_no_residual,
            "there are no residual additions: each sub-layer's output must be added to its input, first "
            "for attention, then for the FFN.",
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
            "that is pre-norm. Post-norm runs the sub-layer on x as it is, adds its output to x, and "
            "normalises the sum.",
        ),
        Mistake(
            _post_norm_inside,
            "the norm is applied to the sub-layer's output before the residual; post-norm normalises "
            "after the addition, the whole sum.",
        ),
        Mistake(
            _post_no_last_norm,
            "the second sum is not normalised: the block must end with ffn_norm applied to the sum after "
            "the FFN, so that its output is a LayerNorm output.",
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
        "the FFN step mirrors the attention step with ffn and ffn_norm: the block ends with a norm, "
        "nothing is added after it, and the FFN reads the output of the first norm, not the block's "
        "input.",
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
            "the gate and the up projection are swapped: SiLU goes on the projection by w_gate, and the "
            "projection by w_up passes through unchanged.",
        ),
        Mistake(
            lambda x, wg, wu, wd: _glu(torch.sigmoid, x, wg, wu, wd),
            "the gate uses sigmoid(z); Swish/SiLU is z · sigmoid(z). A plain sigmoid gate is the "
            "original GLU.",
        ),
        Mistake(
            lambda x, wg, wu, wd: _glu(nn.functional.gelu, x, wg, wu, wd),
            "the gate uses GELU (that is GEGLU); SwiGLU's gate is SiLU, z · sigmoid(z).",
        ),
        Mistake(
            lambda x, wg, wu, wd: _glu(torch.relu, x, wg, wu, wd),
            "the gate uses ReLU (that is ReGLU); SwiGLU's gate is SiLU, z · sigmoid(z).",
        ),
        Mistake(
            lambda x, wg, wu, wd: nn.functional.silu((x @ wg.T) * (x @ wu.T)) @ wd.T,
            "SiLU is applied to the product; apply it to the gate projection only, then multiply the two "
            "branches.",
        ),
        Mistake(
            lambda x, wg, wu, wd: _glu(nn.functional.silu, x, wg, wg, wd),
            "both branches use w_gate; the second branch is the projection by w_up.",
        ),
    ),
    hints=(
        "three matrices in a linear layer's layout (out, in), so each projection multiplies by the "
        "transposed weight: two projections to the hidden width, one back to C.",
        "only the gate branch goes through SiLU, z · sigmoid(z); the up branch does not. Both are (..., "
        "hidden) and are multiplied elementwise before the down projection.",
        "a sketch: torch.nn.functional.silu(x @ w_gate.T) * (x @ w_up.T), shape (..., hidden); project "
        "that product back to C with w_down, transposed as well because of the (out, in) layout.",
    ),
    difficulty=1,
    minutes=5,
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
    d_model, _ = case.args
    T = int(output.reshape(()))
    if not 1 <= T <= 2048:
        return f"the answer T = {T} is not a sequence length from 1 to 2,048, where these cases cross"
    for t, too_soon in ((T, False), (T - 1, True)):  # more at T, and not yet at T - 1
        core, rest = counted_block_flops(d_model, 3 * d_model, t) if t else (0, 0)  # no tokens, no FLOPs
        if (core > rest) == too_soon:
            return (
                f"at T = {t} FlopCounterMode counts {core:,} FLOPs in q kᵀ and P v, {rest:,} in the projections "
                f"and the FFN: {f'more already, so T = {T} is not the smallest' if too_soon else 'not more yet'}"
            )
    return None


def _crossover(d_model: int, num_heads: int, proj: int = 8, ffn: int = 12, core: int = 4, tie: int = 1):
    """A count of toy_sublayers' block (FFN width 3 · d_model): per token 8 d² + 12 d², per pair 4 d."""
    per_token, per_pair = proj * d_model**2 + ffn * d_model**2, core * d_model  # FLOPs
    return torch.tensor(per_token // per_pair + tie)  # tie = 0: the first T with T·pair >= token


_CROSSOVER_SLIPS = {  # each slip's message and the terms it changes in the count
    "only the attention sub-layer was measured: the FFN's FLOPs belong to the block too, on the side that "
    "grows like T. Run the whole pre-norm block under the counter.": {"ffn": 0},
    "the projections were counted on the T² side or left out: only the batched products of the attention "
    "core, the scores and the weighted sum of the values, grow like T²; the four projections are per-token "
    "work like the FFN.": {"proj": 0},
    "off by one: at that T both sides tie; the T² terms must cost *more*, strictly, not as much.": {"tie": 0},
}


def _crossover_cases(g: torch.Generator) -> list[Case]:
    def sizes() -> tuple[int, int]:
        heads = int(torch.randint(1, 4, (), generator=g))
        return heads * int(torch.randint(2, 5, (), generator=g)), heads  # d_model up to 12: T up to 61

    values = [(768, 12), (12, 3), (7, 1), sizes(), sizes()]  # GPT-2 small's width: two lengths measure it
    measured = [(6, 2), sizes()]  # the property runs a block of attn_edu.blocks at T and T - 1
    return [Case(s) for s in values] + [Case(s, group="counted by FlopCounterMode") for s in measured]


CROSSOVER = Exercise(
    exercise_id="08.6",
    title="measure where a block's T² terms (q kᵀ, P v) start to cost more FLOPs than the rest",
    function_name="crossover_length",
    arg_names=("d_model", "num_heads"),
    # per token over per (query, key) pair, from the library's count at T = 1; the next integer wins
    reference=lambda C, H: torch.tensor(
        (n := block_flops(1, C, 3 * C))["per_token"] // n["attention_core"] + 1
    ),
    make_cases=_crossover_cases,
    mistakes=tuple(Mistake(lambda C, H, k=k: _crossover(C, H, **k), m) for m, k in _CROSSOVER_SLIPS.items()),
    properties=(
        Property(
            "counted by FlopCounterMode",
            "in a real block, q kᵀ and P v must cost more FLOPs than the rest at your T, and not at T - 1.",
            holds=_crossover_holds,
        ),
    ),
    hints=(
        "measure instead of deriving: run the given block on a short sequence inside PyTorch's FLOP "
        "counter, and split what it counts by operation. The attention core's two products are batched "
        "over heads; the projections and the FFN are plain matrix products.",
        "the counter keeps a table per operation after the block ends: the batched products (bmm) are "
        "the T² side, everything else the per-token side. Measure two lengths, say 1 and 2 tokens: one "
        "side doubles, the other quadruples, so each is a number times T or times T². Where is the second "
        "first strictly larger?",
        "a sketch: attn, ffn, attn_norm, ffn_norm = toy_sublayers(d_model, num_heads, seed=0); for T in (1, "
        "2): x = torch.zeros(1, T, d_model), run both sub-layers under FlopCounterMode(display=False), and "
        "read the entry named aten.bmm against the sum of the others; with c and r those at T = 1, the "
        "answer is torch.tensor(r // c + 1).",
    ),
    difficulty=3,
    minutes=35,
    kind="measure",
)


# ---------------------------------------------------------------------------------------------------------
# 08.5 a GPT-2 block from Hugging Face's weights (build and verify against transformers' GPT2Block)

GPT2_NORM_EPS = 1e-5  # GPT2Config.layer_norm_epsilon


def gpt2_block_weights(g: torch.Generator, C: int, hidden: int) -> tuple[torch.Tensor, ...]:
    """A GPT-2 block's twelve tensors in Hugging Face's order and layout (``Conv1D`` weights are (in, out))."""

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return scale * torch.randn(*shape, generator=g)

    return (
        1.0 + rand(C, scale=0.5),  # ln_1.weight (C,): not all ones, so a forgotten norm shows
        rand(C, scale=0.5),  # ln_1.bias (C,)
        rand(C, 3 * C, scale=C**-0.5),  # attn.c_attn.weight (C, 3C): q | k | v side by side
        rand(3 * C, scale=0.5),  # attn.c_attn.bias (3C,)
        rand(C, C, scale=C**-0.5),  # attn.c_proj.weight (C, C)
        rand(C, scale=0.5),  # attn.c_proj.bias (C,)
        1.0 + rand(C, scale=0.5),  # ln_2.weight (C,)
        rand(C, scale=0.5),  # ln_2.bias (C,)
        rand(C, hidden, scale=C**-0.5),  # mlp.c_fc.weight (C, hidden)
        rand(hidden, scale=0.5),  # mlp.c_fc.bias (hidden,)
        rand(hidden, C, scale=hidden**-0.5),  # mlp.c_proj.weight (hidden, C)
        rand(C, scale=0.5),  # mlp.c_proj.bias (C,)
    )


def _gpt2_block_cases(g: torch.Generator) -> list[Case]:
    def x(B: int, T: int, C: int) -> torch.Tensor:
        return 2.0 * torch.randn(B, T, C, generator=g) + 0.5  # not zero-mean, not unit-scale

    return [
        Case((x(2, 5, 12), *gpt2_block_weights(g, 12, 48), 3)),  # D = 4, hidden = 4C as in GPT-2
        Case((x(1, 7, 15), *gpt2_block_weights(g, 15, 60), 5)),  # D = 3
        Case((x(3, 6, 21), *gpt2_block_weights(g, 21, 40), 7)),  # D = 3, hidden not 4C
        Case((x(2, 4, 10), *gpt2_block_weights(g, 10, 40), 2)),  # D = 5
        Case((x(1, 9, 18), *gpt2_block_weights(g, 18, 72), 3)),  # D = 6
    ]


def gpt2_block_state(*weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """The state dict of the library's GPT-2 block (:class:`attn_edu.blocks.PreNormDecoderBlock`) from
    Hugging Face's twelve tensors, mapped as :func:`attn_edu.interop.gpt_from_hf` maps them: each Conv1D
    weight transposed to nn.Linear's (out, in), and c_attn cut into q, k and v."""
    ln_1_w, ln_1_b, c_attn_w, c_attn_b, c_proj_w, c_proj_b, ln_2_w, ln_2_b, fc_w, fc_b, proj_w, proj_b = (
        weights
    )
    C = ln_1_w.shape[0]
    q_w, k_w, v_w = c_attn_w.T.split(C, dim=0)  # 3 x (C, C), nn.Linear layout
    q_b, k_b, v_b = c_attn_b.split(C)  # 3 x (C,)
    return {
        "attn_norm.weight": ln_1_w, "attn_norm.bias": ln_1_b,
        "attn.q_proj.weight": q_w, "attn.q_proj.bias": q_b,
        "attn.k_proj.weight": k_w, "attn.k_proj.bias": k_b,
        "attn.v_proj.weight": v_w, "attn.v_proj.bias": v_b,
        "attn.out_proj.weight": c_proj_w.T, "attn.out_proj.bias": c_proj_b,
        "ffn_norm.weight": ln_2_w, "ffn_norm.bias": ln_2_b,
        "ffn.up_proj.weight": fc_w.T, "ffn.up_proj.bias": fc_b,
        "ffn.down_proj.weight": proj_w.T, "ffn.down_proj.bias": proj_b,
    }  # fmt: skip


def _gpt2_block_reference(x: torch.Tensor, *args: torch.Tensor | int) -> torch.Tensor:
    """The library's GPT-2 block with Hugging Face's weights copied in (:func:`gpt2_block_state`)."""
    *weights, num_heads = args
    C, hidden = weights[8].shape  # mlp.c_fc.weight (C, hidden)
    block = PreNormDecoderBlock(
        MultiHeadAttention(C, int(num_heads)),
        FeedForward(C, hidden, activation="gelu_tanh"),
        nn.LayerNorm(C, eps=GPT2_NORM_EPS),
        nn.LayerNorm(C, eps=GPT2_NORM_EPS),
    )
    block.load_state_dict(gpt2_block_state(*weights))
    return block.eval()(x).detach()  # (B, T, C)


def gpt2_block_variant(
    x, ln_1_w, ln_1_b, c_attn_w, c_attn_b, c_proj_w, c_proj_b, ln_2_w, ln_2_b, fc_w, fc_b, proj_w, proj_b,
    num_heads, *, causal=True, gelu="tanh", proj_transposed=False, scale_dim=None, split_by_reshape=False,
    pre_norm=True,
):  # fmt: skip
    """The GPT-2 block with one piece swapped for a wrong one (the known mistakes below)."""
    B, T, C = x.shape
    H = num_heads
    D = C // H

    def heads(t: torch.Tensor) -> torch.Tensor:
        if split_by_reshape:
            return t.reshape(B, H, T, D)  # tokens and channels mixed
        return t.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)

    def attention(h: torch.Tensor) -> torch.Tensor:
        q, k, v = (h @ c_attn_w + c_attn_b).split(C, dim=-1)  # 3 x (B, T, C)
        q, k, v = heads(q), heads(k), heads(v)  # (B, H, T, D)
        scores = (
            q @ k.transpose(-2, -1) / (D if scale_dim is None else scale_dim(C, D)) ** 0.5
        )  # (B, H, T, T)
        if causal:
            scores = scores.masked_fill(~masks.causal_mask(T), float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)
        merged = out.reshape(B, T, C) if split_by_reshape else out.transpose(1, 2).reshape(B, T, C)
        return merged @ (c_proj_w.T if proj_transposed else c_proj_w) + c_proj_b  # (B, T, C)

    def mlp(h: torch.Tensor) -> torch.Tensor:
        act = nn.functional.gelu(h @ fc_w + fc_b, approximate=gelu)  # (B, T, hidden)
        return act @ proj_w + proj_b  # (B, T, C)

    def ln(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return nn.functional.layer_norm(h, (C,), w, b, GPT2_NORM_EPS)

    if pre_norm:
        x = x + attention(ln(x, ln_1_w, ln_1_b))
        return x + mlp(ln(x, ln_2_w, ln_2_b))  # (B, T, C)
    x = ln(x + attention(x), ln_1_w, ln_1_b)
    return ln(x + mlp(x), ln_2_w, ln_2_b)  # (B, T, C)


GPT2_BLOCK = Exercise(
    exercise_id="08.5",
    kind="build",
    title="a whole GPT-2 block from Hugging Face's weights: pre-norm, causal, tanh GELU, Conv1D (in, out) layout",
    function_name="gpt2_block",
    arg_names=(
        "x",
        "ln_1_weight",
        "ln_1_bias",
        "attn_c_attn_weight",
        "attn_c_attn_bias",
        "attn_c_proj_weight",
        "attn_c_proj_bias",
        "ln_2_weight",
        "ln_2_bias",
        "mlp_c_fc_weight",
        "mlp_c_fc_bias",
        "mlp_c_proj_weight",
        "mlp_c_proj_bias",
        "num_heads",
    ),  # fmt: skip
    reference=_gpt2_block_reference,
    make_cases=_gpt2_block_cases,
    mistakes=(
        Mistake(
            lambda *a: gpt2_block_variant(*a, causal=False),
            "there is no causal mask: GPT-2 is a decoder, so token t may attend only to tokens 0 .. t. Set "
            "the scores of future keys to -inf before the softmax.",
        ),
        Mistake(
            lambda *a: gpt2_block_variant(*a, gelu="none"),
            "the FFN uses the exact (erf) GELU; GPT-2's activation, 'gelu_new', is the tanh "
            "approximation. The two differ by up to about 1e-3.",
        ),
        Mistake(
            lambda *a: gpt2_block_variant(*a, proj_transposed=True),
            "attn.c_proj.weight is used transposed: GPT-2's Conv1D stores its weight as (in, out), so a "
            "projection multiplies by the weight as it is, then adds the bias (the opposite of a linear "
            "layer).",
        ),
        Mistake(
            lambda *a: gpt2_block_variant(*a, scale_dim=lambda C, D: C),
            "the scores are divided by sqrt(C), the model width; each head compares D = C / num_heads "
            "numbers, so divide by sqrt(D).",
        ),
        Mistake(
            lambda *a: gpt2_block_variant(*a, split_by_reshape=True),
            "the heads are split by a plain reshape to (B, H, T, D), which cuts tokens instead of "
            "channels: cut each token's channels into heads first, then move the head axis, and the "
            "reverse to merge them.",
        ),
        Mistake(
            lambda *a: gpt2_block_variant(*a, pre_norm=False),
            "the norms come after the residual sums (post-norm, as in GPT-1 and BERT); GPT-2 normalises "
            "the input of each sub-layer, ln_1 before attention and ln_2 before the MLP, and adds each "
            "output to the raw x.",
        ),
    ),
    hints=(
        "GPT-2's Conv1D weights are (in, out), so a projection multiplies by the weight as it is and "
        "adds the bias. c_attn makes q, k and v at once, side by side in its 3C outputs, in that order.",
        "the attention sub-layer: LayerNorm with ln_1 (eps 1e-5), c_attn, cut into q | k | v, split each into "
        "heads, causal softmax of q kᵀ / sqrt(D), merge the heads, c_proj, and add to x.",
        "a sketch: h = F.layer_norm(x, (C,), ln_1_weight, ln_1_bias, eps=1e-5); c_attn's output, h @ "
        "attn_c_attn_weight plus its bias, splits into q, k, v of C channels each; then the MLP "
        "sub-layer reads the updated x: ln_2, c_fc, F.gelu(..., approximate='tanh'), mlp c_proj, and add "
        "to x once more.",
    ),
    difficulty=3,
    minutes=50,
)


# ---------------------------------------------------------------------------------------------------------
# 08.7 gated attention's output gate (Qwen3-Next)


def _gate_cases(g: torch.Generator) -> list[Case]:
    def case(B: int, T: int, C: int, HD: int, scale: float = 1.0) -> Case:
        x = scale * torch.randn(B, T, C, generator=g) + 0.5  # far from zero mean
        heads = torch.randn(B, T, HD, generator=g)
        return Case((x, heads, torch.randn(HD, C, generator=g) / C**0.5))

    T = int(torch.randint(2, 9, (1,), generator=g))
    return [
        case(1, 3, 8, 6),
        case(2, T, 12, 20),
        case(3, 5, 10, 4, scale=30.0),  # large gate logits: sigmoid saturates at 0 and 1, never NaN
        case(1, 1, 7, 14),  # one token
    ]


def _gate_reference(x: torch.Tensor, heads: torch.Tensor, w_gate: torch.Tensor) -> torch.Tensor:
    gate = OutputGate(x.shape[-1], heads.shape[-1])
    with torch.no_grad():
        gate.proj.weight.copy_(w_gate)
        return gate(x, heads)  # (B, T, H·D)


GATED_OUTPUT = Exercise(
    exercise_id="08.7",
    title="gated attention: each head's output times a sigmoid gate computed from the token itself",
    function_name="gated_output",
    arg_names=("x", "heads", "w_gate"),
    reference=_gate_reference,
    make_cases=_gate_cases,
    mistakes=(
        Mistake(
            lambda x, heads, w_gate: heads * (x @ w_gate.T),
            "the gate has no sigmoid: the projection of x is a logit of any size and sign, so it scales "
            "the heads without bound or flips them. Squash it into (0, 1) first.",
        ),
        Mistake(
            lambda x, heads, w_gate: torch.sigmoid(heads * (x @ w_gate.T)),
            "the sigmoid is taken after the product: the result is a number in (0, 1) whatever the heads "
            "said. The gate is the sigmoid of the projection of x, and it multiplies the heads' output.",
        ),
        Mistake(
            lambda x, heads, w_gate: heads + torch.sigmoid(x @ w_gate.T),
            "the gate is added: a gate scales each coordinate of the heads' output between nothing (0) and all of "
            "it (1), so multiply, element by element.",
        ),
    ),
    hints=(
        "the gate comes from the token's own input x, not from the attention: a linear map of x gives one logit "
        "per coordinate of the concatenated heads.",
        "a gate lies between 0 (shut) and 1 (open): the logits, x projected by w_gate (transposed, a "
        "linear layer's layout) to shape (B, T, H·D), go through a sigmoid.",
        "a sketch: the logits are x @ w_gate.T, shape (B, T, H·D), and torch.sigmoid turns them into the "
        "gate; multiply the heads' output by the gate, element by element: each coordinate of each head "
        "is let through in its own share (the two tensors have the same shape).",
    ),
    difficulty=1,
    minutes=5,
)


EXERCISES = (RMS_NORM, PRE_NORM_BLOCK, POST_NORM_BLOCK, SWIGLU, GPT2_BLOCK, CROSSOVER, GATED_OUTPUT)
