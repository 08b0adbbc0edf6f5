"""Boolean attention masks: ``True`` means *may attend*.

Every mask in the course is built here and is broadcastable to the score matrix ``(B, H, T, S)``.
Only the reference attention turns a mask into ``-inf`` scores.

Polarity warning: :class:`torch.nn.MultiheadAttention` uses the opposite convention for its
``attn_mask`` and ``key_padding_mask`` (``True`` means *ignore*). Use :func:`to_torch_polarity`
where the two meet; :func:`torch.nn.functional.scaled_dot_product_attention` uses ours.

Causal alignment is bottom-right: with ``S >= T`` keys (a KV cache holding ``S - T`` earlier tokens),
query ``t`` sits at absolute position ``S - T + t`` and may see keys ``0 .. S - T + t``.
"""

from __future__ import annotations

import torch

from attn_edu._validate import broadcast_shapes, check_mask, check_positive_int, check_shape, check_tensor


def causal_mask(T: int, S: int | None = None, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Lower-triangular mask, aligned to the bottom-right corner when ``S != T``.

    Query ``t`` may attend to key ``s`` when ``s <= S - T + t``.

    Shapes:
        returns ``(T, S)`` bool, ``S`` defaults to ``T``.

    Example:
        >>> causal_mask(3).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 1]], dtype=torch.int32)
        >>> causal_mask(2, 4).int()   # two new queries after two cached keys
        tensor([[1, 1, 1, 0],
                [1, 1, 1, 1]], dtype=torch.int32)
    """
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    ones = torch.ones(T, S, dtype=torch.bool, device=device)  # (T, S)
    return torch.tril(ones, diagonal=S - T)  # (T, S)


def causal_mask_top_left(
    T: int, S: int | None = None, *, device: torch.device | str | None = None
) -> torch.Tensor:
    """Lower-triangular mask aligned to the top-left corner (PyTorch's ``is_causal`` when ``T != S``).

    Query ``t`` may attend to key ``s`` when ``s <= t``. Shown only to contrast with
    :func:`causal_mask`; for a KV cache it hides keys a query should see.

    Example:
        >>> causal_mask_top_left(2, 4).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0]], dtype=torch.int32)
    """
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    return torch.tril(torch.ones(T, S, dtype=torch.bool, device=device))  # (T, S)


def padding_mask(
    lengths: torch.Tensor | list[int],
    max_len: int | None = None,
    *,
    side: str = "right",
) -> torch.Tensor:
    """Which positions of a padded batch hold real tokens.

    With ``side="right"`` (the usual layout) sequence ``b`` occupies positions ``0 .. lengths[b]-1``;
    with ``side="left"`` (common for batched generation) it occupies the last ``lengths[b]`` positions.

    Shapes:
        lengths ``(B,)`` ints; returns ``(B, max_len)`` bool, ``True`` = real token.

    Example:
        >>> padding_mask([3, 1], 4).int()
        tensor([[1, 1, 1, 0],
                [1, 0, 0, 0]], dtype=torch.int32)
        >>> padding_mask([3, 1], 4, side="left").int()
        tensor([[0, 1, 1, 1],
                [0, 0, 0, 1]], dtype=torch.int32)
    """
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths)
    if lengths.ndim != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths: expected a 1-D integer tensor of shape (B,), got {tuple(lengths.shape)} {lengths.dtype}"
        )
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths: expected non-negative lengths, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is None:
        max_len = longest
    check_positive_int("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"lengths: a sequence of length {longest} does not fit in max_len={max_len}")
    if side not in ("right", "left"):
        raise ValueError(f"side: expected 'right' or 'left', got {side!r}")
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    if side == "right":
        return positions[None, :] < lengths[:, None]  # (B, max_len)
    return positions[None, :] >= (max_len - lengths)[:, None]  # (B, max_len)


def padding_from_attention_mask(attention_mask: torch.Tensor, B: int, T: int) -> torch.Tensor:
    """Hugging Face's ``attention_mask`` (1 = real token, 0 = padding; int or bool) as a bool padding mask.

    Shapes:
        attention_mask ``(B, T)``; returns ``(B, T)`` bool, True = real token
        (:func:`attn_edu.masks.key_mask` turns it into an attention mask).

    Example:
        >>> padding_from_attention_mask(torch.tensor([[1, 1, 0]]), 1, 3)
        tensor([[ True,  True, False]])
    """
    check_tensor("attention_mask", attention_mask)
    check_shape("attention_mask", attention_mask, "B T", B=B, T=T)
    if attention_mask.dtype == torch.bool:
        return attention_mask
    if attention_mask.is_floating_point() or not ((attention_mask == 0) | (attention_mask == 1)).all():
        raise ValueError(
            "attention_mask: expected 1 (real token) / 0 (padding) or a bool mask, "
            f"got dtype {attention_mask.dtype} with values {attention_mask.unique().tolist()[:5]}"
        )
    return attention_mask == 1  # (B, T)


def key_mask(padding: torch.Tensor) -> torch.Tensor:
    """Turn a padding mask ``(B, S)`` into an attention mask that hides padded *keys*.

    Every query may look at every real key; padded queries still produce output (their rows
    are ignored later by the loss).

    Shapes:
        padding ``(B, S)`` bool; returns ``(B, 1, 1, S)``, broadcastable to ``(B, H, T, S)``.

    Example:
        >>> key_mask(padding_mask([2], 3)).shape
        torch.Size([1, 1, 1, 3])
    """
    check_shape("padding", padding, "B S")
    check_mask("padding", padding)
    return padding[:, None, None, :]  # (B, 1, 1, S)


def query_key_mask(query_padding: torch.Tensor, key_padding: torch.Tensor) -> torch.Tensor:
    """Hide padded keys *and* padded queries: a padded query's row is fully masked.

    The reference attention returns a zero row for a fully masked query instead of NaN.

    Shapes:
        query_padding ``(B, T)``, key_padding ``(B, S)``; returns ``(B, 1, T, S)``.

    Example:
        >>> query_key_mask(padding_mask([1], 2), padding_mask([2], 3))[0, 0].int()
        tensor([[1, 1, 0],
                [0, 0, 0]], dtype=torch.int32)
    """
    sizes = check_shape("query_padding", query_padding, "B T")
    check_shape("key_padding", key_padding, "B S", B=sizes["B"])
    check_mask("query_padding", query_padding)
    check_mask("key_padding", key_padding)
    return query_padding[:, None, :, None] & key_padding[:, None, None, :]  # (B, 1, T, S)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks, broadcasting them together; ``None`` entries are skipped.

    A position may be attended only if every mask allows it.

    Example:
        >>> pad = key_mask(padding_mask([2], 3))           # (1, 1, 1, 3)
        >>> combine_masks(causal_mask(3), pad)[0, 0].int()  # (1, 1, 3, 3)
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 1, 0]], dtype=torch.int32)
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    for i, m in enumerate(present):
        check_mask(f"masks[{i}]", m)
    try:
        broadcast_shapes(*(m.shape for m in present))
    except RuntimeError:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(f"masks: expected shapes that broadcast together, got {shapes}") from None
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out


def to_additive(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Boolean mask -> additive float mask (``0`` where allowed, ``-inf`` where hidden).

    Example:
        >>> to_additive(causal_mask(2))
        tensor([[0., -inf],
                [0., 0.]])
    """
    check_mask("mask", mask)
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))


def to_torch_polarity(mask: torch.Tensor) -> torch.Tensor:
    """Flip a mask to :class:`torch.nn.MultiheadAttention`'s polarity (``True`` = *ignore*).

    Example:
        >>> to_torch_polarity(padding_mask([1], 2))
        tensor([[False,  True]])
    """
    check_mask("mask", mask)
    return ~mask
