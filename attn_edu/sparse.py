"""Sparse attention patterns: each query sees only some keys (notebook 11).

Longformer (Beltagy et al. 2020) and BigBird (Zaheer et al. 2020) cut full attention's ``O(T·S)`` cost by
letting each query see a window of neighbours, a few global tokens and some random blocks. Here the
patterns are boolean masks (``True`` = may attend, bottom-right aligned like every mask of
:mod:`attn_edu.masks`) used with the reference attention, so you can *see* a pattern and measure its
density; a real implementation computes only the allowed blocks. Patterns are combined with ``|`` (a key is
visible if *any* pattern allows it), unlike :func:`attn_edu.masks.combine_masks`, which intersects.

Two computations that use the sparsity instead of masking a full matrix: :func:`sliding_window_attention`
(only the key blocks inside the band are multiplied, so it is faster, measured in notebook 11) and
Reformer's locality-sensitive hashing (:func:`lsh_buckets`, :func:`lsh_mask`: a query looks only at keys
that hash to its bucket).
"""

from __future__ import annotations

import torch

from attn_edu._validate import (
    check_floating,
    check_mask,
    check_positive_int,
    check_qkv,
    check_scale,
    check_shape,
)


def _offsets(T: int, S: int | None, device: torch.device | str | None = None) -> torch.Tensor:
    """``offset[t, s] = (S - T + t) - s``: how far key ``s`` lies behind query ``t`` (negative = ahead).

    Query ``t`` sits at absolute position ``S - T + t`` (bottom-right alignment, as in
    :func:`attn_edu.masks.causal_mask`).
    """
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    rows = torch.arange(T, device=device)[:, None] + (S - T)  # (T, 1)
    cols = torch.arange(S, device=device)[None, :]  # (1, S)
    return rows - cols  # (T, S)


def sliding_window_mask(
    T: int,
    S: int | None = None,
    *,
    window: int,
    causal: bool = True,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Each query sees only the keys within ``window`` positions of itself (a local band).

    Causal: key ``s`` is visible from query position ``p`` when ``0 <= p - s < window`` (itself and the
    ``window - 1`` keys before it, as in Mistral's sliding window). Not causal: ``|p - s| < window``,
    a band of ``2·window - 1`` keys (Longformer §3.1 counts its window ``w`` as the total width;
    Hugging Face's bidirectional ``sliding_window=w`` means ``|p - s| <= w``, our ``window=w + 1``).
    Stacking L causal layers lets information travel ``L·(window - 1)`` positions (:func:`layers_to_reach`).

    Shapes:
        returns ``(T, S)`` bool, ``S`` defaults to ``T``.

    Example:
        >>> sliding_window_mask(5, window=2).int()
        tensor([[1, 0, 0, 0, 0],
                [1, 1, 0, 0, 0],
                [0, 1, 1, 0, 0],
                [0, 0, 1, 1, 0],
                [0, 0, 0, 1, 1]], dtype=torch.int32)
    """
    check_positive_int("window", window)
    offset = _offsets(T, S, device)  # (T, S)
    if causal:
        return (offset >= 0) & (offset < window)  # (T, S)
    return offset.abs() < window  # (T, S)


def layers_to_reach(seq_len: int, window: int) -> int:
    """How many stacked causal sliding-window layers it takes before the last token can depend on token 0.

    One layer of :func:`sliding_window_mask` (``causal=True``) lets position ``p`` read ``p - window + 1 .. p``:
    ``window - 1`` positions back, since the window counts the query's own token. Each further layer adds
    another ``window - 1`` (Mistral 7B, Jiang et al. 2023, §2, whose ``W`` counts the keys before the token:
    ``k`` layers reach ``k·W`` back), so the last token, ``seq_len - 1`` positions after token 0, needs
    ``⌈(seq_len - 1) / (window - 1)⌉`` layers. ``seq_len == 1`` needs 0 (the last token is token 0);
    ``window == 1`` never reaches past the token itself: ``-1`` when ``seq_len > 1``.

    Shapes:
        ``seq_len``, ``window`` ints; returns an int.

    Example:
        >>> layers_to_reach(8 * 4096, 4096), layers_to_reach(10, 4), layers_to_reach(11, 4)
        (9, 3, 4)
        >>> layers_to_reach(1, 1), layers_to_reach(5, 1)
        (0, -1)
    """
    check_positive_int("seq_len", seq_len)
    check_positive_int("window", window)
    if seq_len == 1:
        return 0
    if window == 1:
        return -1
    return -(-(seq_len - 1) // (window - 1))  # ceil division: a last, partial step is a whole layer


def dilated_window_mask(
    T: int, S: int | None = None, *, window: int, dilation: int, causal: bool = True
) -> torch.Tensor:
    """A sliding window with gaps: ``window`` keys spaced ``dilation`` apart (Longformer §3.1).

    Causal: key ``s`` is visible from position ``p`` when ``d = p - s`` is one of ``0, dilation, ...,
    (window - 1)·dilation``. Not causal: ``|d|`` is. The same number of keys reaches ``dilation`` times
    further; ``dilation=1`` is :func:`sliding_window_mask`.

    Shapes:
        returns ``(T, S)`` bool, ``S`` defaults to ``T``.

    Example:
        >>> dilated_window_mask(5, window=2, dilation=2).int()
        tensor([[1, 0, 0, 0, 0],
                [0, 1, 0, 0, 0],
                [1, 0, 1, 0, 0],
                [0, 1, 0, 1, 0],
                [0, 0, 1, 0, 1]], dtype=torch.int32)
    """
    check_positive_int("window", window)
    check_positive_int("dilation", dilation)
    offset = _offsets(T, S)  # (T, S)
    distance = offset if causal else offset.abs()  # (T, S)
    return (distance >= 0) & (distance % dilation == 0) & (distance < window * dilation)  # (T, S)


def _positions(name: str, positions: torch.Tensor | list[int], size: int) -> torch.Tensor:
    """Validate a list of positions in ``0 .. size - 1``; return a long tensor."""
    positions = torch.as_tensor(positions, dtype=torch.long)
    if positions.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D list of positions, got shape {tuple(positions.shape)}")
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= size):
        raise ValueError(f"{name}: expected positions in 0 .. {size - 1}, got {positions.tolist()}")
    return positions


def global_tokens_mask(
    T: int, S: int | None = None, *, global_positions: torch.Tensor | list[int]
) -> torch.Tensor:
    """Longformer's global attention: global tokens attend everywhere and every token attends to them.

    ``global_positions`` are absolute positions (``0 .. S - 1``), e.g. ``[0]`` for a ``[CLS]`` token.
    A query at absolute position ``S - T + t`` that is global gets a full row; a global key gets a full
    column (Beltagy et al. 2020, §3.1, "Global Attention"). Combine with a window by ``|``.

    Shapes:
        returns ``(T, S)`` bool, ``S`` defaults to ``T``.

    Example:
        >>> global_tokens_mask(4, global_positions=[1]).int()
        tensor([[0, 1, 0, 0],
                [1, 1, 1, 1],
                [0, 1, 0, 0],
                [0, 1, 0, 0]], dtype=torch.int32)
    """
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    is_global = torch.zeros(S, dtype=torch.bool)  # (S,)
    is_global[_positions("global_positions", global_positions, S)] = True
    query_positions = torch.arange(T) + (S - T)  # (T,): absolute positions, bottom-right aligned
    query_is_global = torch.isin(query_positions, is_global.nonzero().flatten())  # (T,)
    return query_is_global[:, None] | is_global[None, :]  # (T, S)


def random_blocks_mask(
    T: int,
    S: int | None = None,
    *,
    num_random: int,
    generator: torch.Generator | None,
    block_size: int = 1,
) -> torch.Tensor:
    """BigBird's random attention: each block of queries sees ``num_random`` key blocks drawn at random.

    Queries and keys are cut into blocks of ``block_size`` (the last may be shorter); every query
    block picks ``num_random`` distinct key blocks uniformly (Zaheer et al. 2020, §2 and App. D, where
    blocks make the sparse product fast on accelerators). ``block_size=1`` picks single keys.
    Pass a seeded ``generator`` for a reproducible pattern.

    Shapes:
        returns ``(T, S)`` bool, ``S`` defaults to ``T``.

    Example:
        >>> m = random_blocks_mask(6, num_random=2, generator=torch.Generator().manual_seed(0))
        >>> m.sum(dim=-1).tolist()                  # two keys per query
        [2, 2, 2, 2, 2, 2]
    """
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    check_positive_int("num_random", num_random)
    check_positive_int("block_size", block_size)
    num_q_blocks, num_k_blocks = -(-T // block_size), -(-S // block_size)
    if num_random > num_k_blocks:
        raise ValueError(
            f"num_random: expected at most {num_k_blocks} (the number of key blocks), got {num_random}"
        )
    # A random permutation per query block; its first num_random entries are the chosen key blocks.
    noise = torch.rand(num_q_blocks, num_k_blocks, generator=generator)  # (T/b, S/b)
    chosen = noise.argsort(dim=-1)[:, :num_random]  # (T/b, num_random)
    block_mask = torch.zeros(num_q_blocks, num_k_blocks, dtype=torch.bool)  # (T/b, S/b)
    block_mask.scatter_(1, chosen, True)
    full = block_mask.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)  # (T', S')
    return full[:T, :S]  # (T, S)


def bigbird_mask(
    T: int,
    *,
    window: int,
    global_positions: torch.Tensor | list[int],
    num_random: int,
    generator: torch.Generator | None,
    block_size: int = 1,
) -> torch.Tensor:
    """BigBird's pattern: a local window, a few global tokens and a few random keys per query.

    ``mask = window | global | random`` (Zaheer et al. 2020, §2, Fig. 1). The window is not causal
    (BigBird is an encoder pattern): ``|t - s| < window``. Its density falls like ``1/T`` as the
    sequence grows, yet the paper shows the pattern keeps full attention's expressive power.

    Shapes:
        returns ``(T, T)`` bool.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> m = bigbird_mask(64, window=3, global_positions=[0], num_random=2, generator=g)
        >>> m.shape, round(mask_density(m), 2)
        (torch.Size([64, 64]), 0.13)
    """
    local = sliding_window_mask(T, window=window, causal=False)  # (T, T)
    glob = global_tokens_mask(T, global_positions=global_positions)  # (T, T)
    rand = random_blocks_mask(T, num_random=num_random, generator=generator, block_size=block_size)  # (T, T)
    return local | glob | rand  # (T, T)


def mask_density(mask: torch.Tensor) -> float:
    """Fraction of (query, key) pairs a mask allows: the cost relative to full attention.

    Example:
        >>> from attn_edu.masks import causal_mask
        >>> mask_density(causal_mask(4))          # 10 of 16 pairs
        0.625
    """
    check_mask("mask", mask)
    if mask.numel() == 0:
        raise ValueError(f"mask: expected a non-empty mask, got shape {tuple(mask.shape)}")
    return mask.float().mean().item()


def sliding_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: None = None,
    *,
    is_causal: bool = True,
    window: int,
    block: int = 128,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal sliding-window attention that computes only the keys inside the band, block by block.

    The result equals the reference attention with :func:`sliding_window_mask` (``T == S``), but a block
    of ``block`` queries starting at ``t0`` multiplies only the keys ``t0 − window + 1 … t0 + block − 1``:
    ``O(T·(window + block))`` scores instead of ``O(T²)``, the saving a masked dense product never makes.
    A real kernel does the same with fixed-size tiles (Longformer's banded kernel; FlexAttention's block mask).
    ``mask`` (``None``) and ``is_causal`` (``True``) are there for the course's common signature, so that
    ``functools.partial(sliding_window_attention, window=w)`` can be a model's ``attention_fn``.

    Shapes:
        q, k ``(..., T, D)``, v ``(..., T, Dv)``; returns ``(..., T, Dv)``.

    Example:
        >>> from attn_edu.attention import scaled_dot_product_attention
        >>> q, k, v = torch.randn(3, 2, 50, 8).unbind(0)
        >>> dense = scaled_dot_product_attention(q, k, v, sliding_window_mask(50, window=7))
        >>> torch.allclose(sliding_window_attention(q, k, v, window=7, block=16), dense, atol=1e-6)
        True
    """
    if mask is not None or not is_causal:
        raise ValueError(
            "mask: the band is the mask; pass mask=None and is_causal=True (the window is causal)"
        )
    sizes = check_qkv(q, k, v)
    T = sizes["T"]
    if sizes["S"] != T:
        raise ValueError(f"k: expected as many keys as queries (self-attention), got T={T}, S={sizes['S']}")
    check_positive_int("window", window)
    check_positive_int("block", block)
    scale = check_scale(scale, sizes["D"])
    out = []
    for start in range(0, T, block):
        stop = min(start + block, T)
        first = max(0, start - window + 1)  # the oldest key any query of this block may see
        scores = (q[..., start:stop, :] @ k[..., first:stop, :].transpose(-2, -1)) * scale  # (..., b, w + b)
        band = sliding_window_mask(stop - start, stop - first, window=window, device=q.device)  # (b, w + b)
        weights = torch.softmax(scores.masked_fill(~band, float("-inf")), dim=-1)  # every row sees itself
        out.append(weights @ v[..., first:stop, :])  # (..., b, Dv)
    return torch.cat(out, dim=-2)  # (..., T, Dv)


def lsh_buckets(
    x: torch.Tensor, num_buckets: int, *, rounds: int = 1, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Reformer's angular locality-sensitive hash: ``h(x) = argmax([x R ; −x R])`` for a random rotation ``R``.

    ``R`` is a random ``(D, num_buckets / 2)`` Gaussian matrix; vectors at a small angle land in the same
    bucket with high probability, vectors far apart rarely (Kitaev, Kaiser and Levskaya 2020, §3, after
    Andoni et al. 2015). Each of ``rounds`` hashes draws its own ``R``.

    Shapes:
        x ``(..., T, D)``; returns ``(rounds, ..., T)`` ints in ``0 .. num_buckets − 1``.

    Example:
        >>> x = torch.tensor([[1.0, 0.0], [0.99, 0.1], [-1.0, 0.0]])
        >>> b = lsh_buckets(x, 8, rounds=4, generator=torch.Generator().manual_seed(0))
        >>> bool((b[:, 0] == b[:, 1]).all()), bool((b[:, 0] == b[:, 2]).any())   # near: same; opposite: never
        (True, False)
    """
    check_floating("x", x)
    D = check_shape("x", x, "... T D")["D"]
    check_positive_int("num_buckets", num_buckets)
    check_positive_int("rounds", rounds)
    if num_buckets % 2:
        raise ValueError(
            f"num_buckets: expected an even number (the hash is argmax over [xR; -xR]), got {num_buckets}"
        )
    rotations = torch.randn(rounds, D, num_buckets // 2, generator=generator).to(x.device)  # (rounds, D, n/2)
    projected = torch.einsum("...td,rdn->r...tn", x.float(), rotations)  # (rounds, ..., T, n/2)
    return torch.cat([projected, -projected], dim=-1).argmax(dim=-1)  # (rounds, ..., T)


def lsh_mask(buckets: torch.Tensor, *, causal: bool = False, exclude_self: bool = False) -> torch.Tensor:
    """Which keys a query may see under LSH attention: those sharing its bucket in at least one round.

    Reformer ties queries and keys (shared-QK attention), so one hash per token serves both sides, and a
    token always shares its own bucket. With shared keys a token's score with itself is the largest of
    all, so Reformer forbids it (``exclude_self``) unless nothing else shares the token's buckets
    (Kitaev et al. 2020, §3, "Causal masking for shared-QK attention"). With ``causal`` only earlier tokens.

    Shapes:
        buckets ``(rounds, ..., T)``; returns ``(..., T, T)`` bool.

    Example:
        >>> lsh_mask(torch.tensor([[0, 1, 0, 1]])).int()
        tensor([[1, 0, 1, 0],
                [0, 1, 0, 1],
                [1, 0, 1, 0],
                [0, 1, 0, 1]], dtype=torch.int32)
    """
    if buckets.dim() < 2:
        raise ValueError(f"buckets: expected shape (rounds, ..., T), got {tuple(buckets.shape)}")
    same = (buckets[..., :, None] == buckets[..., None, :]).any(dim=0)  # (..., T, T)
    if causal:
        same = same & _offsets(buckets.shape[-1], None, buckets.device).ge(0)
    if exclude_self:
        others = same & ~torch.eye(buckets.shape[-1], dtype=torch.bool, device=buckets.device)  # (..., T, T)
        alone = ~others.any(dim=-1, keepdim=True)  # (..., T, 1): a token with no one else keeps itself
        same = others | (same & alone)
    return same
