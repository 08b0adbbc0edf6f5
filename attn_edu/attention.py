"""Scaled dot-product attention: the reference implementation every other version is tested against.

    Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(D)) V          (Vaswani et al., 2017, eq. 1)

Each query scores every key, the scores become weights that sum to 1 over the keys, and the
output is the weighted average of the values. Dividing by ``sqrt(D)`` keeps the scores' variance
near 1 whatever the head size (notebook 03 measures why that matters).

Conventions (see :mod:`attn_edu.masks`): masks are boolean with ``True`` = may attend and broadcast
to ``(..., T, S)``; ``is_causal`` is bottom-right aligned; a query with no visible key returns a row of
zeros, never NaN.

:func:`fused_attention` is PyTorch's fused kernel behind the same signature, a peer of the reference for
training, used only where the two agree.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_edu._validate import (
    check_broadcast,
    check_floating,
    check_mask,
    check_positive_int,
    check_qkv,
    check_scale,
    check_shape,
    check_sinks,
)
from attn_edu.masks import causal_mask


def _allowed_positions(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, is_causal: bool
) -> torch.Tensor | None:
    """Merge ``mask`` (already checked) with the causal mask; ``None`` when every key is visible."""
    if not is_causal:
        return mask
    causal = causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (T, S)
    return causal if mask is None else mask & causal  # (..., T, S)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half precision (exp of fp16 scores overflows easily), the input's own dtype otherwise."""
    return torch.promote_types(dtype, torch.float32)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim that gives hidden positions exactly zero weight.

    Hidden positions (``mask == False``) get ``-inf`` before the softmax. A row with no visible position
    would be ``softmax([-inf, ..., -inf]) = 0/0 = NaN``; such rows get finite scores first and are
    zeroed afterwards, so they come out as zeros and their gradient is zero, not NaN.
    Half-precision scores are computed in float32 and cast back.

    Shapes:
        scores ``(..., T, S)``, mask bool broadcastable to it; returns ``(..., T, S)``.

    Example:
        >>> masked_softmax(torch.zeros(2, 3), torch.tensor([[True, True, False], [False, False, False]]))
        tensor([[0.5000, 0.5000, 0.0000],
                [0.0000, 0.0000, 0.0000]])
    """
    check_floating("scores", scores)
    if scores.ndim < 1:
        raise ValueError(f"scores: expected shape (..., S), got {tuple(scores.shape)}")
    if mask is not None:
        check_mask("mask", mask, tuple(scores.shape), "scores' shape (..., T, S)")
    return _masked_softmax(scores, mask)


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """:func:`masked_softmax` once its arguments are checked: the public functions check, this computes."""
    work = scores.to(_compute_dtype(scores.dtype))  # float32 for half precision
    if mask is None:
        return torch.softmax(work, dim=-1).to(scores.dtype)  # (..., T, S)
    work = work.masked_fill(~mask, float("-inf"))  # (..., T, S): exp(-inf) = 0, so hidden keys weigh 0
    has_key = mask.any(dim=-1, keepdim=True)  # (..., T, 1): False where a query sees no key at all
    work = work.masked_fill(~has_key, 0.0)  # (..., T, S): not 0/0 = NaN for such a row, but finite scores
    weights = torch.softmax(work, dim=-1).masked_fill(~mask, 0.0)  # (..., T, S): then its weights are zeroed
    return weights.to(scores.dtype)


def _sink_softmax(scores: torch.Tensor, mask: torch.Tensor | None, sinks: torch.Tensor) -> torch.Tensor:
    """The masked softmax with a learned sink: one more key, always visible, whose logit is ``sinks``.

    ``sinks`` (checked, ``(H, 1)``) broadcasts against ``scores.shape[:-1]``. The sink's share of each row
    is dropped after the softmax: it has no value to weigh, so the row's weights sum to less than 1.
    """
    sink = sinks.to(scores.dtype).expand(scores.shape[:-1])[..., None]  # (..., T, 1)
    if mask is not None:  # the sink is visible to every query
        mask = torch.cat([mask.expand(scores.shape), torch.ones_like(sink, dtype=torch.bool)], dim=-1)
    return _masked_softmax(torch.cat([scores, sink], dim=-1), mask)[..., :-1]  # (..., T, S)


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    score_bias: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """The attention matrix ``softmax(q kᵀ · scale)``: how much each query reads from each key.

    The softmax runs in float32 even for half-precision inputs (``exp`` of fp16 scores overflows
    easily), then the weights are cast back to ``q.dtype``. Hidden positions are set to ``-inf``
    before the softmax, so they get exactly zero weight. A query whose every key is hidden gets
    a row of zeros: the naive ``softmax([-inf, ..., -inf])`` would be ``0/0 = NaN``.

    ``score_bias`` is an optional float term added to the scaled scores before masking: the
    relative-position bias of T5 or the distance penalty of ALiBi (notebook 06). ``sinks`` (optional,
    ``(H,)``) are learned sink logits, as in :func:`scaled_dot_product_attention`: each row then sums to
    less than 1, the rest going to a sink that is not a column of the result.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, mask and score_bias broadcastable to ``(..., T, S)``,
        sinks ``(H,)`` for q ``(..., H, T, D)``; returns ``(..., T, S)``. Leading dims of q and k must
        broadcast (e.g. ``(B, H)``).

    Example:
        >>> q = torch.tensor([[1.0, 0.0]]); k = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> attention_weights(q, k, scale=1.0)        # e^1 / (e^1 + e^0) = 0.731
        tensor([[0.7311, 0.2689]])
        >>> attention_weights(q, k, torch.tensor([[False, False]]))   # nothing visible: zeros
        tensor([[0., 0.]])
    """
    scale, sinks = _check_inputs(q, k, None, mask, scale, score_bias, sinks)
    return _weights(q, k, mask, is_causal, scale, score_bias, sinks)  # (..., T, S)


def _check_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor | None,
    mask: torch.Tensor | None,
    scale: float | None,
    score_bias: torch.Tensor | None,
    sinks: torch.Tensor | None = None,
) -> tuple[float, torch.Tensor | None]:
    """The one check of an attention call's arguments, made by the public functions; returns the scale and
    the sinks shaped ``(H, 1)`` (or None)."""
    sizes = check_qkv(q, k, v)
    scores_shape = (*sizes["batch"], sizes["T"], sizes["S"])
    if mask is not None:
        check_mask("mask", mask, scores_shape)
    if score_bias is not None:
        check_floating("score_bias", score_bias)
        check_broadcast("score_bias", tuple(score_bias.shape), scores_shape, "(..., T, S)")
    if sinks is not None:
        sinks = check_sinks(sinks, sizes["batch"])  # (H, 1)
    return check_scale(scale, sizes["D"]), sinks


def _weights(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
    scale: float,
    score_bias: torch.Tensor | None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`attention_weights` once its arguments are checked: scores, bias, mask, softmax."""
    work = _compute_dtype(q.dtype)  # float32 for half precision
    scores = (q.to(work) @ k.to(work).transpose(-2, -1)) * scale  # (..., T, S)
    if score_bias is not None:
        scores = scores + score_bias.to(work)  # (..., T, S)
    allowed = _allowed_positions(q, k, mask, is_causal)  # (..., T, S) or None
    if sinks is not None:  # learned sink logits (gpt-oss): weight that goes to no value
        return _sink_softmax(scores, allowed, sinks).to(q.dtype)  # (..., T, S)
    return _masked_softmax(scores, allowed).to(q.dtype)  # (..., T, S)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    score_bias: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reference attention: ``softmax(q kᵀ · scale) v`` with ``scale = 1/sqrt(D)`` by default.

    Same arguments as :func:`torch.nn.functional.scaled_dot_product_attention` with a boolean
    mask, except that ``is_causal`` is bottom-right aligned (PyTorch's is top-left when ``T != S``)
    and a fully masked query returns zeros instead of NaN. ``is_causal`` and ``mask`` may be
    combined: a key is visible only if both allow it. ``score_bias`` (optional, float) is added to
    the scaled scores, as in :func:`attention_weights`.

    ``sinks`` (optional, ``(H,)``, float) are learned sink logits, one per head, as gpt-oss has them
    (OpenAI, 2025): each row's softmax gets one more term ``exp(sinks[h])`` in its denominator, from a
    key that carries no value. A head can then attend to nothing: its weights over the real keys sum to
    ``1 - p_sink``, and a query that sees no key at all puts all its weight on the sink and returns zeros.
    It makes explicit the attention sink a softmax model otherwise builds on its first token (Xiao et
    al., 2024). The sinks are not scaled; they get gradients like any parameter.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``, mask and score_bias broadcastable
        to ``(..., T, S)``, sinks ``(H,)`` for q ``(..., H, T, D)``; returns ``(..., T, Dv)``.

    Example:
        >>> q = torch.randn(2, 4, 5, 8); k = torch.randn(2, 4, 7, 8); v = torch.randn(2, 4, 7, 3)
        >>> scaled_dot_product_attention(q, k, v).shape           # (B, H, T, Dv)
        torch.Size([2, 4, 5, 3])
        >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        >>> torch.allclose(scaled_dot_product_attention(q, k, v), ref, atol=1e-6)
        True
    """
    scale, sinks = _check_inputs(q, k, v, mask, scale, score_bias, sinks)
    weights = _weights(q, k, mask, is_causal, scale, score_bias, sinks)  # (..., T, S)
    work = _compute_dtype(v.dtype)
    return (weights.to(work) @ v.to(work)).to(v.dtype)  # (..., T, Dv)


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """PyTorch's fused attention, for training only: the reference's result (up to rounding), faster.

    :func:`torch.nn.functional.scaled_dot_product_attention` never builds the ``(T, S)`` weights in
    Python; on two CPU cores it makes a training step of the default model of
    :mod:`attn_edu.experiments.text_gpt` ~1.4× faster. It is plugged in with
    ``GPT(config, attention_fn=fused_attention)`` (the one attention signature), and
    only where it agrees with :func:`attn_edu.attention.scaled_dot_product_attention`: ``T == S`` when
    causal (PyTorch aligns ``is_causal`` top-left, the reference bottom-right; they differ once a KV
    cache makes ``S > T``), and a mask (a sliding window's band) that leaves every query a key
    (PyTorch returns NaN for a query that sees nothing, the reference zeros). Evaluation and
    generation use the reference.

    Shapes:
        q ``(B, H, T, D)``, k and v ``(B, H, S, D)``; returns ``(B, H, T, D)``.

    Example:
        >>> q, k, v = torch.randn(3, 1, 2, 5, 4).unbind(0)
        >>> torch.allclose(fused_attention(q, k, v, is_causal=True),
        ...                scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
        True
    """
    check_qkv(q, k, v)
    T, S = q.shape[-2], k.shape[-2]
    if is_causal and T != S:
        raise ValueError(
            f"k: with is_causal, fused_attention needs S == T (PyTorch's causal mask is top-left "
            f"aligned); got T={T}, S={S}"
        )
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)  # (B, H, T, D)
    check_mask("mask", mask, (*q.shape[:-2], T, S), "(B, H, T, S)")
    if is_causal:  # PyTorch takes a mask or is_causal, not both
        mask = mask & causal_mask(T, S, device=mask.device)
    if not bool(mask.any(dim=-1).all()):
        raise ValueError(
            "mask: every query must see at least one key for fused_attention (PyTorch gives NaN)"
        )
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)  # (B, H, T, D)


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """How spread out each query's attention is: the entropy of each row of weights, in nats.

        H(p) = -Σ_s p_s log p_s,      with 0 · log 0 = 0

    A uniform row over ``S`` keys has the largest entropy, ``log S``; a one-hot row (all the weight on
    one key) has 0. A row of zeros (a query that sees no key, see :func:`masked_softmax`) also gets 0.
    Notebook 03 uses it to watch the softmax saturate when the ``1/√d_k`` of Vaswani et al. (2017,
    §3.2.1) is left out. Natural log: divide by ``log 2`` for bits.

    Shapes:
        weights ``(..., T, S)`` (any ``(..., S)``: the last dim is the keys); returns ``(..., T)`` in
        ``weights.dtype`` (half precision is summed in float32).

    Example:
        >>> import math
        >>> S = 8
        >>> uniform = torch.full((2, 3, S), 1 / S)               # (B, T, S)
        >>> torch.allclose(attention_entropy(uniform), torch.full((2, 3), math.log(S)))
        True
        >>> attention_entropy(torch.eye(3)).tolist()              # one-hot rows: no uncertainty
        [0.0, 0.0, 0.0]
    """
    check_floating("weights", weights)
    check_shape("weights", weights, "... S")
    if not bool((weights >= 0).all()):  # False for NaN too
        lowest = float(weights.min())
        raise ValueError(f"weights: expected probabilities >= 0 (softmax rows), got minimum {lowest:.3g}")
    work = weights.to(_compute_dtype(weights.dtype))
    return torch.special.entr(work).sum(dim=-1).to(weights.dtype)  # (..., T); entr(0) = 0, never NaN


def attention_flops(B: int, H: int, T: int, S: int, D: int, Dv: int | None = None) -> int:
    """The floating-point operations of attention's two matrix products, ``q kᵀ`` and ``P v``.

    Per sequence and head, ``q kᵀ`` is ``T · S`` dot products of length ``D`` and ``P v`` is ``T · Dv`` dot
    products of length ``S``. A multiply-add counts as 2 FLOPs, the convention of PyTorch's
    ``torch.utils.flop_counter.FlopCounterMode`` and of the FlashAttention papers (Dao, 2023, §4.1:
    ``4 · seqlen² · head dimension · number of heads`` for ``T = S``, ``Dv = D``):

        FLOPs = 2 · B · H · T · S · D  +  2 · B · H · T · S · Dv

    The scale, the softmax and a mask add only ``O(B · H · T · S)`` more operations; like PyTorch's counter,
    this count leaves them out. A causal mask does not change it either: the reference computes every
    score (a fused kernel that skips the hidden half does about half the work).

    Shapes:
        the sizes of q ``(B, H, T, D)``, k ``(B, H, S, D)`` and v ``(B, H, S, Dv)``; ``Dv`` defaults to
        ``D``; returns an int.

    Example:
        >>> attention_flops(1, 1, 2, 3, 4, 5)            # 2·2·3·4 for q kᵀ, 2·2·3·5 for P v
        108
        >>> attention_flops(1, 1, 1024, 1024, 64) == 4 * 1024**2 * 64
        True
    """
    B, H, T, S, D = (check_positive_int(n, x) for n, x in zip("BHTSD", (B, H, T, S, D)))
    Dv = D if Dv is None else check_positive_int("Dv", Dv)
    scores = 2 * B * H * T * S * D  # q kᵀ: (B, H, T, D) @ (B, H, D, S)
    mixing = 2 * B * H * T * S * Dv  # P v: (B, H, T, S) @ (B, H, S, Dv)
    return scores + mixing
