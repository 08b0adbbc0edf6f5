"""Positional information for attention, which by itself cannot tell one order of tokens from another.

Attention treats its keys as a *set*: permute the tokens and the outputs permute with them
(notebook 06 checks this). Word order has to be injected. This module holds the classic answers,
in the order the notebook teaches them:

1. **Sinusoidal** absolute encodings added to the embeddings (Vaswani et al., 2017, §3.5), and the
   rotation matrix ``M_k`` that moves them ``k`` positions (exact, or fitted to a table by least squares),
   and the cosine similarity of a table's rows.
2. **Learned** absolute embeddings (BERT, GPT-2): one trained vector per position up to ``max_len``.
3. **Relative** representations inside attention (Shaw et al., 2018): vectors for clipped distances.
4. **T5 bucketed bias** (Raffel et al., 2020, §2.1): one learned scalar per head and distance bucket.
5. **ALiBi** (Press et al., 2022): a fixed linear penalty on distance, one slope per head, and how far
   back each slope lets a head look.

Rotary embeddings (RoPE) have their own module, :mod:`attn_edu.rope`.

Relative positions follow the causal-mask convention of :mod:`attn_edu.masks`: with ``S >= T`` keys,
query ``t`` sits at absolute position ``S - T + t`` (bottom-right alignment).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attn_edu._validate import (
    check_floating,
    check_frequency_base,
    check_positive_int,
    check_scale,
    check_shape,
    check_tensor,
)
from attn_edu.attention import attention_weights


def _check_even(name: str, value: int) -> int:
    check_positive_int(name, value)
    if value % 2:
        raise ValueError(f"{name}: expected an even number (sin/cos come in pairs), got {value}")
    return value


# ---------------------------------------------------------------------------------------------------
# 1. Sinusoidal encodings
# ---------------------------------------------------------------------------------------------------


def _angular_frequencies(dim: int, base: float) -> torch.Tensor:
    """ω_i = base^(−2i/dim) for i = 0 .. dim/2 − 1, in float64. Shape ``(dim/2,)``."""
    i = torch.arange(dim // 2, dtype=torch.float64)  # (dim/2,)
    return base ** (-2.0 * i / dim)  # (dim/2,)


def sinusoidal_encoding(
    num_positions: int, dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The fixed sin/cos position table of the original Transformer.

        PE(pos, 2i)   = sin(pos · ω_i)
        PE(pos, 2i+1) = cos(pos · ω_i),     ω_i = base^(−2i/dim)       (Vaswani et al., 2017, §3.5)

    Each pair of columns is a clock hand turning at its own speed, from one turn every 2π positions
    (``i = 0``) to one turn every ~2π·base positions (see :func:`wavelengths`). The table is computed
    in float64 and then cast: ``pos · ω`` in float32 loses ~1e-4 rad by position 1000.

    Shapes:
        returns ``(num_positions, dim)``; ``dim`` must be even.

    Example:
        >>> pe = sinusoidal_encoding(4, 6)
        >>> pe.shape
        torch.Size([4, 6])
        >>> pe[0]                                   # position 0: sin 0 = 0, cos 0 = 1
        tensor([0., 1., 0., 1., 0., 1.])
    """
    check_positive_int("num_positions", num_positions)
    _check_even("dim", dim)
    base = check_frequency_base(base)
    pos = torch.arange(num_positions, dtype=torch.float64)  # (num_positions,)
    angles = pos[:, None] * _angular_frequencies(dim, base)[None, :]  # (num_positions, dim/2)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (num_positions, dim/2, 2)
    return pe.reshape(num_positions, dim).to(dtype)  # (num_positions, dim)


def wavelengths(dim: int, *, base: float = 10000.0) -> torch.Tensor:
    """The period, in positions, of each sin/cos pair: ``λ_i = 2π / ω_i``.

    They form a geometric progression from ``2π`` (fastest pair) up to ``2π · base^((dim−2)/dim)``,
    just under ``2π · base`` (Vaswani et al., 2017, §3.5).

    Shapes:
        returns ``(dim/2,)`` float64.

    Example:
        >>> wavelengths(4, base=100.0)              # 2π and 2π·100^(2/4) = 20π
        tensor([ 6.2832, 62.8319], dtype=torch.float64)
    """
    _check_even("dim", dim)
    return 2 * math.pi / _angular_frequencies(dim, check_frequency_base(base))  # (dim/2,)


def rotation_matrix(k: int, dim: int, *, base: float = 10000.0) -> torch.Tensor:
    """The matrix ``M_k`` with ``PE(pos + k) = M_k @ PE(pos)`` for every ``pos``.

    By the angle-addition formulas each (sin, cos) pair moves by a 2×2 rotation that depends on
    ``k`` but not on ``pos``::

        [sin((p+k)ω)]   [ cos kω   sin kω] [sin pω]
        [cos((p+k)ω)] = [−sin kω   cos kω] [cos pω]

    so a *linear* map can shift positions: the reason Vaswani et al. (§3.5) hoped the model could
    "easily learn to attend by relative positions". ``M_k`` is block-diagonal and orthogonal, and
    ``M_a @ M_b = M_(a+b)``.

    Shapes:
        returns ``(dim, dim)`` float64 (see :func:`sinusoidal_encoding` for why float64).

    Example:
        >>> pe = sinusoidal_encoding(10, 8, dtype=torch.float64)
        >>> torch.allclose(rotation_matrix(3, 8) @ pe[2], pe[5])
        True
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"k: expected an int shift (may be negative), got {k!r}")
    _check_even("dim", dim)
    angle = k * _angular_frequencies(dim, check_frequency_base(base))  # (dim/2,)
    cos, sin = angle.cos(), angle.sin()  # (dim/2,)
    blocks = torch.stack((torch.stack((cos, sin), -1), torch.stack((-sin, cos), -1)), -2)  # (dim/2, 2, 2)
    return torch.block_diag(*blocks)  # (dim, dim)


def shift_by_rotation(pe: torch.Tensor, k: int, *, base: float = 10000.0) -> torch.Tensor:
    """Move sinusoidal encodings ``k`` positions by multiplying with :func:`rotation_matrix`.

    Shapes:
        pe ``(..., D)`` rows of :func:`sinusoidal_encoding` (same ``base``); returns ``(..., D)``.

    Example:
        >>> pe = sinusoidal_encoding(6, 4, dtype=torch.float64)
        >>> torch.allclose(shift_by_rotation(pe[:3], 3), pe[3:])
        True
    """
    check_floating("pe", pe)
    D = check_shape("pe", pe, "... D")["D"]
    M = rotation_matrix(k, _check_even("pe.shape[-1] (D)", D), base=base).to(pe.dtype)  # (D, D)
    return pe @ M.T  # (..., D): row vectors, so (M @ peᵀ)ᵀ = pe @ Mᵀ


def fit_shift_map(table: torch.Tensor, k: int) -> torch.Tensor:
    """The linear map that moves every row of a position table ``k`` rows on, fitted by least squares.

        M = argmin_M ‖table[:-k] @ M − table[k:]‖²         (rows = positions; ``torch.linalg.lstsq``)

    Notebook 06 asks with it whether a layer could *learn* the shift of §3.5 from data. For a sinusoidal
    table the exact answer is ``rotation_matrix(k, D).T`` (the transpose, as the rows are positions), and
    the fit recovers it for every pair that turns within the table. A pair whose period is far longer than
    the table barely moves over it: its two columns are nearly constant, many maps fit about equally well,
    and the fit is loose there (on the CPU the SVD driver ``gelsd`` returns the smallest of them).

    Shapes:
        table ``(N, D)`` float, ``1 <= k < N``; returns ``(D, D)`` in the table's dtype.

    Example:
        >>> pe = sinusoidal_encoding(200, 6, base=100.0, dtype=torch.float64)
        >>> torch.allclose(fit_shift_map(pe, 3), rotation_matrix(3, 6, base=100.0).T)
        True
    """
    check_floating("table", table)
    N = check_shape("table", table, "N D")["N"]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k < N:
        raise ValueError(f"k: expected an int shift with 1 <= k < N={N} (the table's rows), got {k!r}")
    driver = "gelsd" if table.device.type == "cpu" else None  # CUDA has only "gels" (full rank)
    return torch.linalg.lstsq(table[:-k], table[k:], driver=driver).solution  # (D, D)


def position_similarity(table: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every pair of rows of a position table: ``cos(P_p, P_q)``.

    For the sinusoidal table every row has length ``sqrt(D/2)`` (one unit per sin/cos pair), so this is
    ``PE(p)·PE(q) / (D/2) = mean_i cos((p − q) ω_i)``: a function of ``p − q`` alone. For a learned table
    it shows whatever structure training left in the rows.

    Shapes:
        table ``(N, D)`` float; returns ``(N, N)`` in ``[−1, 1]``.

    Example:
        >>> position_similarity(torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, -2.0]]))
        tensor([[ 1.0000,  0.7071,  0.0000],
                [ 0.7071,  1.0000, -0.7071],
                [ 0.0000, -0.7071,  1.0000]])
    """
    check_floating("table", table)
    check_shape("table", table, "N D")
    unit = table / table.norm(dim=-1, keepdim=True).clamp(min=torch.finfo(table.dtype).tiny)  # (N, D)
    return unit @ unit.T  # (N, N)


# ---------------------------------------------------------------------------------------------------
# 2. Learned absolute embeddings
# ---------------------------------------------------------------------------------------------------


class LearnedPositionalEmbedding(nn.Module):
    """One trained vector per position, ``0 .. max_len − 1`` (BERT, GPT-2).

    Simple and flexible, but a table has no row for position ``max_len``: the model cannot run on
    longer inputs at all, unlike sinusoids, relative schemes or RoPE.

    Shapes:
        ``forward(T)`` returns ``(T, C)`` for positions ``offset .. offset + T − 1``;
        ``forward(positions)`` with an integer tensor ``(...)`` returns ``(..., C)``.

    Example:
        >>> emb = LearnedPositionalEmbedding(max_len=16, dim=8)
        >>> emb(5).shape
        torch.Size([5, 8])
        >>> emb(torch.tensor([[0, 3], [1, 2]])).shape
        torch.Size([2, 2, 8])
    """

    def __init__(self, max_len: int, dim: int) -> None:
        super().__init__()
        self.max_len = check_positive_int("max_len", max_len)
        self.dim = check_positive_int("dim", dim)
        self.embedding = nn.Embedding(max_len, dim)  # row p = the vector for position p
        # GPT-2 and BERT draw position vectors from N(0, 0.02²); nn.Embedding's N(0, 1) would
        # swamp token embeddings of the same scale.
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, T_or_positions: int | torch.Tensor, *, offset: int = 0) -> torch.Tensor:
        if isinstance(T_or_positions, torch.Tensor):
            positions = T_or_positions
            if positions.is_floating_point() or positions.dtype == torch.bool:
                raise ValueError(f"positions: expected an integer tensor, got dtype {positions.dtype}")
            positions = positions + offset
        else:
            T = check_positive_int("T", T_or_positions)
            positions = torch.arange(offset, offset + T, device=self.embedding.weight.device)  # (T,)
        if positions.numel():
            lowest, highest = int(positions.min()), int(positions.max())
            if lowest < 0:
                raise ValueError(f"positions: expected positions >= 0, got {lowest}")
            if highest >= self.max_len:
                raise ValueError(
                    f"position {highest} is past max_len={self.max_len}: "
                    "learned absolute embeddings cannot extrapolate"
                )
        return self.embedding(positions)  # (..., C)


# ---------------------------------------------------------------------------------------------------
# 3. Shaw et al. (2018): relative position representations
# ---------------------------------------------------------------------------------------------------


def relative_positions(T: int, S: int | None = None, *, offset: int | None = None) -> torch.Tensor:
    """Signed distance ``key position − query position`` for every (query, key) pair.

    Query ``t`` sits at absolute position ``offset + t``, with ``offset = S − T`` by default: the
    bottom-right alignment of :func:`attn_edu.masks.causal_mask` (``T`` new queries after ``S − T``
    cached keys). Negative = the key is in the past; ``causal_mask(T, S)`` is exactly ``rel <= 0``.

    Shapes:
        returns ``(T, S)`` int64, ``S`` defaults to ``T``.

    Example:
        >>> relative_positions(3)
        tensor([[ 0,  1,  2],
                [-1,  0,  1],
                [-2, -1,  0]])
        >>> relative_positions(1, 4)                # one new query after three cached keys
        tensor([[-3, -2, -1,  0]])
    """
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    if offset is None:
        offset = S - T
    query_pos = torch.arange(T)[:, None] + offset  # (T, 1)
    key_pos = torch.arange(S)[None, :]  # (1, S)
    return key_pos - query_pos  # (T, S)


def clipped_relative_positions(T: int, S: int | None, max_distance: int) -> torch.Tensor:
    """:func:`relative_positions` clipped to ``[−k, k]`` with ``k = max_distance`` (Shaw et al., eq. 6).

    Shaw et al. argue exact distances matter little beyond a few tokens; clipping also lets the
    model run on sequences longer than any seen in training.

    Shapes:
        returns ``(T, S)`` int64 in ``−k .. k``.

    Example:
        >>> clipped_relative_positions(1, 6, 2)
        tensor([[-2, -2, -2, -2, -1,  0]])
    """
    check_positive_int("max_distance", max_distance)
    return relative_positions(T, S).clamp(-max_distance, max_distance)  # (T, S)


class ShawRelativePosition(nn.Module):
    """Learned vectors ``a^K`` and ``a^V`` for each clipped distance ``−k .. k`` (Shaw et al., 2018, §3.2).

    ``forward(T, S)`` looks them up for every (query, key) pair; pass the result to
    :func:`shaw_attention`. One table is shared by all heads, as in the paper.

    Shapes:
        ``forward(T, S)`` returns ``rel_k (T, S, D)`` and ``rel_v (T, S, Dv)``.

    Example:
        >>> rel = ShawRelativePosition(max_distance=2, head_dim=4)
        >>> rel_k, rel_v = rel(3, 5)
        >>> rel_k.shape, rel_v.shape
        (torch.Size([3, 5, 4]), torch.Size([3, 5, 4]))
    """

    def __init__(self, max_distance: int, head_dim: int, *, value_dim: int | None = None) -> None:
        super().__init__()
        self.max_distance = check_positive_int("max_distance", max_distance)
        value_dim = head_dim if value_dim is None else value_dim
        num_distances = 2 * max_distance + 1  # −k .. k
        self.key_embedding = nn.Embedding(num_distances, check_positive_int("head_dim", head_dim))  # a^K
        self.value_embedding = nn.Embedding(num_distances, check_positive_int("value_dim", value_dim))  # a^V

    def forward(self, T: int, S: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        rel = clipped_relative_positions(T, S, self.max_distance)  # (T, S) in −k .. k
        index = (rel + self.max_distance).to(self.key_embedding.weight.device)  # (T, S) in 0 .. 2k
        return self.key_embedding(index), self.value_embedding(index)  # (T, S, D), (T, S, Dv)


def shaw_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rel_k: torch.Tensor,
    rel_v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention with relative position vectors added to the keys and the values (Shaw et al., 2018).

        e_ij = q_i · (k_j + a^K_ij) · scale                              (eq. 5)
        z_i  = Σ_j softmax_j(e_ij) · (v_j + a^V_ij)                     (eq. 3)

    Implemented as the reference attention with ``score_bias = (q_i · a^K_ij) · scale``, plus the
    weighted sum of ``a^V``. With all ``a`` zero this is plain scaled dot-product attention.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``, rel_k ``(T, S, D)``,
        rel_v ``(T, S, Dv)``, mask broadcastable to ``(..., T, S)``; returns ``(..., T, Dv)``.

    Example:
        >>> q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4)
        >>> rel_k, rel_v = ShawRelativePosition(2, 4)(3, 5)
        >>> shaw_attention(q, k, v, rel_k, rel_v, is_causal=True).shape
        torch.Size([2, 3, 4])
    """
    sizes = check_shape("q", q, "... T D")
    k_sizes = check_shape("k", k, "... S D", D=sizes["D"])
    v_sizes = check_shape("v", v, "... S Dv", S=k_sizes["S"])
    T, S, D, Dv = sizes["T"], k_sizes["S"], sizes["D"], v_sizes["Dv"]
    check_floating("rel_k", rel_k)
    check_floating("rel_v", rel_v)
    check_shape("rel_k", rel_k, "T S D", T=T, S=S, D=D)
    check_shape("rel_v", rel_v, "T S Dv", T=T, S=S, Dv=Dv)
    scale_value = check_scale(scale, D)

    # q_i · a^K_ij: each query meets its own row of distance vectors.
    position_scores = torch.einsum("...td,tsd->...ts", q.float(), rel_k.float()) * scale_value  # (..., T, S)
    weights = attention_weights(
        q, k, mask, is_causal=is_causal, scale=scale, score_bias=position_scores
    )  # (..., T, S)
    content = weights.float() @ v.float()  # (..., T, Dv)
    position = torch.einsum("...ts,tsd->...td", weights.float(), rel_v.float())  # (..., T, Dv)
    return (content + position).to(v.dtype)  # (..., T, Dv)


# ---------------------------------------------------------------------------------------------------
# 4. T5 (Raffel et al., 2020): bucketed relative position bias
# ---------------------------------------------------------------------------------------------------


def t5_relative_position_bucket(
    relative_position: torch.Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """Map each signed distance ``key − query`` to one of ``num_buckets`` buckets (Raffel et al., §2.1).

    Short distances get a bucket each; longer ones share log-spaced buckets, and every distance
    ``>= max_distance`` shares the last one. With ``bidirectional=True`` (encoder) half the buckets
    are for keys before the query and half for keys after it; a decoder (``False``) only looks back,
    so every future distance falls in bucket 0 along with distance 0.

    With ``n`` buckets per direction and ``n_exact = n // 2``:

        bucket(d) = d                                                          if d < n_exact
                  = n_exact + ⌊ln(d / n_exact) / ln(max_distance / n_exact) · (n − n_exact)⌋,
                    capped at n − 1                                           otherwise

    Shapes:
        relative_position: any integer shape; returns the same shape, int64 in ``0 .. num_buckets − 1``.

    Example:
        >>> d = torch.tensor([-200, -20, -3, 0, 3, 20, 200])
        >>> t5_relative_position_bucket(d, num_buckets=16, max_distance=64)
        tensor([ 7,  6,  3,  0, 11, 14, 15])
        >>> t5_relative_position_bucket(d, bidirectional=False, num_buckets=16, max_distance=64)
        tensor([15, 11,  3,  0,  0,  0,  0])
    """
    check_tensor("relative_position", relative_position)
    if relative_position.is_floating_point() or relative_position.dtype == torch.bool:
        raise ValueError(
            f"relative_position: expected an integer tensor, got dtype {relative_position.dtype}"
        )
    check_positive_int("num_buckets", num_buckets)
    check_positive_int("max_distance", max_distance)
    rel = relative_position.long()
    if bidirectional:
        per_direction = num_buckets // 2
        first_bucket = torch.where(rel > 0, per_direction, 0)  # keys after the query use the upper half
        distance = rel.abs()
    else:
        per_direction = num_buckets
        first_bucket = torch.zeros_like(rel)
        distance = (-rel).clamp(min=0)  # future keys count as distance 0
    if per_direction < 2:
        raise ValueError(f"num_buckets: expected at least 2 buckets per direction, got {num_buckets}")

    exact = per_direction // 2
    # log-spaced buckets for exact .. max_distance; clamp(min=exact) keeps log() finite where unused
    log_ratio = torch.log(distance.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
    far_bucket = exact + (log_ratio * (per_direction - exact)).long()
    far_bucket = far_bucket.clamp(max=per_direction - 1)
    return first_bucket + torch.where(distance < exact, distance, far_bucket)


class T5RelativeBias(nn.Module):
    """T5's learned scalar bias per head and relative-position bucket, added to the attention scores.

        score_ij = q_i · k_j + b_h(bucket(j − i))            (Raffel et al., 2020, §2.1)

    T5 computes it once in the first layer and shares it across layers, and does *not* divide the
    scores by ``sqrt(D)`` (its initialisation absorbs the factor); pass ``scale=1.0`` to reproduce T5.

    ``forward(T, S)`` places query ``t`` at absolute position ``offset + t`` with ``offset = S − T`` by
    default (bottom-right, as :func:`relative_positions`): right for an encoder (``T == S``) and for a
    decoder whose cache holds the ``S − T`` earlier tokens.

    Shapes:
        ``forward(T, S)`` returns ``(1, H, T, S)`` float, for ``score_bias=`` of
        :func:`attn_edu.attention.scaled_dot_product_attention`.

    Example:
        >>> bias = T5RelativeBias(num_heads=4, num_buckets=8, max_distance=16)
        >>> bias(3, 5).shape
        torch.Size([1, 4, 3, 5])
    """

    def __init__(
        self, num_heads: int, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128
    ) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.bidirectional = bidirectional  # True in the encoder, False in the decoder
        self.num_buckets = check_positive_int("num_buckets", num_buckets)  # 32 in every T5 size
        self.max_distance = check_positive_int("max_distance", max_distance)  # 128: beyond, one bucket
        self.embedding = nn.Embedding(num_buckets, num_heads)  # row = bucket, column = head

    def forward(self, T: int, S: int | None = None, *, offset: int | None = None) -> torch.Tensor:
        rel = relative_positions(T, S, offset=offset)  # (T, S)
        buckets = t5_relative_position_bucket(
            rel,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )  # (T, S)
        values = self.embedding(buckets.to(self.embedding.weight.device))  # (T, S, H)
        return values.permute(2, 0, 1).unsqueeze(0)  # (1, H, T, S)


# ---------------------------------------------------------------------------------------------------
# 5. ALiBi (Press et al., 2022): attention with linear biases
# ---------------------------------------------------------------------------------------------------


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-8.0 / n)
    return [start ** (i + 1) for i in range(n)]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """One fixed slope per head: the geometric sequence ``2^(−8/n · i)``, ``i = 1 .. n`` (Press et al., §3).

    For 8 heads: 1/2, 1/4, ..., 1/256. When ``n`` is not a power of two the paper takes the ``m``
    slopes of the nearest lower power of two, ``m = 2^⌊log2 n⌋``, then adds the odd-numbered ones
    (every other, starting with the first) of the ``2m`` sequence until there are ``n``.

    Shapes:
        returns ``(H,)`` float32.

    Example:
        >>> alibi_slopes(4)
        tensor([0.2500, 0.0625, 0.0156, 0.0039])
    """
    check_positive_int("num_heads", num_heads)
    m = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = _power_of_two_slopes(m)
    slopes += _power_of_two_slopes(2 * m)[0::2][: num_heads - m]
    return torch.tensor(slopes, dtype=torch.float32)  # (H,)


def alibi_bias(num_heads: int, T: int, S: int | None = None) -> torch.Tensor:
    """ALiBi's additive score bias: ``−slope_h · distance`` between query and key.

        score_ij = q_i · k_j / sqrt(D) − m_h · (i − j)              (Press et al., 2022, §3)

    ``distance = |query position − key position|`` with the bottom-right alignment of
    :func:`relative_positions`. The paper uses ALiBi with a causal mask, where only past keys
    (``i >= j``) are seen; taking the absolute value gives future keys a symmetric penalty, the usual
    extension to bidirectional attention, and changes nothing under a causal mask.

    Shapes:
        returns ``(H, T, S)`` float32; add a batch dim or let it broadcast to ``(B, H, T, S)``.

    Example:
        >>> alibi_bias(2, 3)[0]                     # slope 1/16 for head 0 of 2
        tensor([[ 0.0000, -0.0625, -0.1250],
                [-0.0625,  0.0000, -0.0625],
                [-0.1250, -0.0625,  0.0000]])
    """
    return alibi_bias_from_slopes(alibi_slopes(num_heads), T, S)  # (H, T, S)


def alibi_bias_from_slopes(slopes: torch.Tensor, T: int, S: int | None = None) -> torch.Tensor:
    """:func:`alibi_bias` for any slopes: ``bias[h, i, j] = −slopes[h] · |i − j|``, bottom-right aligned.

    Useful with slopes of your own (learned ones, or another schedule than the paper's).

    Shapes:
        slopes ``(H,)``; returns ``(H, T, S)`` in the slopes' floating dtype.

    Example:
        >>> alibi_bias_from_slopes(torch.tensor([1.0, 0.5]), 2, 3)[1]   # S > T: the last query is newest
        tensor([[-0.5000,  0.0000, -0.5000],
                [-1.0000, -0.5000,  0.0000]])
    """
    check_floating("slopes", slopes)
    check_shape("slopes", slopes, "H")
    distance = relative_positions(T, S).abs().to(slopes.dtype)  # (T, S)
    # 0 − x rather than −x, so distance 0 shows as 0. and not −0. in printed tables
    return 0.0 - slopes[:, None, None] * distance  # (H, T, S)


def alibi_mean_distance(slopes: torch.Tensor, num_keys: int | None = None) -> torch.Tensor:
    """How far back a head looks on average when ALiBi's bias alone sets its weights (all scores equal).

    The weights fall geometrically with distance, ``w_d ∝ r^d`` with ``r = e^(−m)``, so the mean distance is

        Σ_d d r^d / Σ_d r^d = 1 / (e^m − 1)                     over d = 0, 1, 2, ... (no end)
                            = 1 / (e^m − 1) − n r^n / (1 − r^n)   over d = 0 .. n − 1 (n = num_keys)

    and ``1 / (e^m − 1) = 1/m − 1/2 + m/12 − ...``: about ``1/m − 1/2`` tokens. With ``num_keys`` the sum
    stops at the first token: a head whose ``1/m`` is not small against ``n`` reaches less far.

    Shapes:
        slopes ``(H,)``; returns ``(H,)`` float64.

    Example:
        >>> alibi_mean_distance(torch.tensor([0.5, 1 / 256]))            # no end: 1 / (e^m − 1)
        tensor([  1.5415, 255.5003], dtype=torch.float64)
        >>> alibi_mean_distance(torch.tensor([0.5, 1 / 256]), 256)       # 256 keys: the gentle head is cut short
        tensor([  1.5415, 106.5143], dtype=torch.float64)
    """
    check_floating("slopes", slopes)
    check_shape("slopes", slopes, "H")
    if not (slopes > 0).all():
        raise ValueError(f"slopes: expected slopes > 0, got {slopes.tolist()}")
    m = slopes.double()  # (H,)
    unbounded = 1.0 / torch.expm1(m)  # (H,)
    if num_keys is None:
        return unbounded
    n = check_positive_int("num_keys", num_keys)
    r_n = torch.exp(-m * n)  # (H,) r^n
    return unbounded - n * r_n / (1.0 - r_n)  # (H,)
