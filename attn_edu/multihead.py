"""Multi-head attention: several small attentions side by side, each in its own subspace.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O,
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)            (Vaswani et al., 2017, section 3.2.2)

The ``H`` projections ``W_i^Q`` (each ``C x D``) are stored as one ``C x C`` matrix ``q_proj``; splitting
its output into ``H`` slices of width ``D = C / H`` gives the heads. Likewise for keys and values. (A model
may also choose ``D`` freely, ``head_dim=``: the matrices are then ``C x H·D``.)

Grouped-query attention (GQA, Ainslie et al., 2023, section 2.2) gives ``H_kv < H`` key/value heads; each
group of ``H / H_kv`` consecutive query heads shares one of them (multi-query attention, Shazeer 2019,
is ``H_kv = 1``). Only the key/value projections and the KV cache shrink; the kv heads are repeated just
before the attention product, so the attention itself is ordinary multi-head attention.

QK-norm (:class:`attn_edu.qk_norm.QKNorm`, ``qk_norm=``) normalises each head's queries and keys before their
dot product, so that their size cannot grow during training.

Mask polarity: our masks are bool with ``True`` = *may attend* (:mod:`attn_edu.masks`).
:class:`torch.nn.MultiheadAttention`'s ``attn_mask`` and ``key_padding_mask`` use ``True`` = *ignore*;
convert with :func:`attn_edu.masks.to_torch_polarity` where the two meet.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from attn_edu._validate import (
    check_broadcast,
    check_floating,
    check_head_dim,
    check_mask,
    check_positive_int,
    check_scale,
    check_shape,
)
from attn_edu.attention import attention_weights, scaled_dot_product_attention
from attn_edu.masks import combine_masks
from attn_edu.sparse import sliding_window_mask


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Cut the model dimension into ``num_heads`` slices and move heads next to the batch.

    Head ``h`` gets channels ``h*D .. (h+1)*D - 1``: the same layout as PyTorch and Hugging Face.

    Shapes:
        x ``(B, T, C)``; returns ``(B, H, T, D)`` with ``D = C / H``.

    Example:
        >>> split_heads(torch.zeros(2, 5, 12), num_heads=3).shape
        torch.Size([2, 3, 5, 4])
    """
    check_positive_int("num_heads", num_heads)
    B, T, C = check_shape("x", x, "B T C").values()
    if C % num_heads:
        raise ValueError(f"x: model dim C={C} is not divisible by num_heads={num_heads}")
    x = x.view(B, T, num_heads, C // num_heads)  # (B, T, H, D)
    return x.transpose(1, 2)  # (B, H, T, D)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Undo :func:`split_heads`: put the heads' outputs side by side again ("Concat" in the paper).

    Shapes:
        x ``(B, H, T, D)``; returns ``(B, T, C)`` with ``C = H * D``.

    Example:
        >>> x = torch.randn(2, 5, 12)
        >>> torch.equal(merge_heads(split_heads(x, 3)), x)
        True
    """
    B, H, T, D = check_shape("x", x, "B H T D").values()
    x = x.transpose(1, 2)  # (B, T, H, D)
    return x.reshape(B, T, H * D)  # (B, T, C)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Repeat each key/value head ``n_rep`` times so that every query head has a partner (GQA).

    Copies are consecutive: kv head ``j`` becomes heads ``j*n_rep .. (j+1)*n_rep - 1``, so query head
    ``h`` reads kv head ``h // n_rep`` (the Hugging Face Llama layout).

    Shapes:
        x ``(B, H_kv, S, D)``; returns ``(B, H_kv * n_rep, S, D)``.

    Example:
        >>> kv = torch.tensor([10.0, 20.0]).view(1, 2, 1, 1)    # two kv heads
        >>> repeat_kv(kv, 3).flatten().tolist()
        [10.0, 10.0, 10.0, 20.0, 20.0, 20.0]
    """
    check_positive_int("n_rep", n_rep)
    B, H_kv, S, D = check_shape("x", x, "B H_kv S D").values()
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(B, H_kv, n_rep, S, D)  # (B, H_kv, n_rep, S, D)
    return x.reshape(B, H_kv * n_rep, S, D)  # (B, H, S, D)


@runtime_checkable
class SupportsKVCache(Protocol):
    """What :class:`MultiHeadAttention` needs from one layer's key/value cache
    (:class:`attn_edu.kv_cache.KVCacheLayer` is one).

    ``seq_len`` counts the tokens already stored (it is also the position of the first new token,
    which rotary embeddings need). ``update(k, v)`` appends the new keys and values and returns
    everything stored so far. Keys are stored with ``H_kv`` heads, before :func:`repeat_kv`: that is
    where GQA saves memory.

    A cache whose ``positions_in_cache`` is true (StreamingLLM's, :class:`attn_edu.kv_cache.StreamingKVCacheLayer`)
    stores keys unrotated; the attention then turns the keys it returns to positions ``0 .. S − 1``.

    Shapes:
        ``update``: k, v ``(B, H_kv, T, D)`` new; returns k_all, v_all ``(B, H_kv, S, D)``, ``S = seq_len + T``.
    """

    @property
    def seq_len(self) -> int: ...

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class AttentionFn(Protocol):
    """What every attention implementation is: ``fn(q, k, v, mask=None, *, is_causal=False, scale=None)``.

    The reference (:func:`attn_edu.attention.scaled_dot_product_attention`), the tiled one
    (:func:`attn_edu.flash.tiled_attention`), the Triton kernel's and PyTorch's fused one all are.
    """

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        scale: float | None = None,
    ) -> torch.Tensor: ...


class BiasedAttentionFn(AttentionFn, Protocol):
    """An :class:`AttentionFn` that also adds a float ``score_bias`` to the scaled scores, before masking.

    Models with a learned bias on every score (T5's relative positions) need one; the reference is one.
    """

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        scale: float | None = None,
        score_bias: torch.Tensor | None = None,
    ) -> torch.Tensor: ...


def takes_score_bias(attention_fn: Callable[..., torch.Tensor]) -> bool:
    """Whether ``attention_fn`` accepts ``score_bias=`` (a :class:`BiasedAttentionFn`), read off its signature.

    Example:
        >>> from attn_edu.attention import scaled_dot_product_attention
        >>> from attn_edu.flash import tiled_attention
        >>> takes_score_bias(scaled_dot_product_attention), takes_score_bias(tiled_attention)
        (True, False)
    """
    try:
        parameters = inspect.signature(attention_fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: it cannot promise the keyword
        return False
    return any(
        (p.name == "score_bias" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        or p.kind is p.VAR_KEYWORD
        for p in parameters
    )


def require_score_bias(attention_fn: Callable[..., torch.Tensor], model: str) -> None:
    """Raise a ``ValueError`` naming ``model`` when ``attention_fn`` cannot take the ``score_bias`` it will pass."""
    if not takes_score_bias(attention_fn):
        name = getattr(attention_fn, "__qualname__", type(attention_fn).__name__)
        raise ValueError(
            f"attention_fn: {model} adds a bias to every attention score, so it needs "
            f"fn(q, k, v, mask=None, *, is_causal=False, scale=None, score_bias=None); {name} takes no "
            "score_bias (attn_edu.attention.scaled_dot_product_attention does)"
        )


class MultiHeadAttention(nn.Module):
    """Multi-head (and grouped-query) attention with separate ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``.

    ``out = out_proj(merge_heads(attention_fn(q, k, v)))`` with ``q = split_heads(q_proj(query))`` and
    the keys and values likewise (Vaswani et al., 2017, section 3.2.2). With ``num_kv_heads < num_heads``
    it is grouped-query attention (Ainslie et al., 2023); ``num_kv_heads=1`` is multi-query attention.

    Args:
        embed_dim: model dimension ``C`` of the queries and of the output.
        num_heads: query heads ``H``; must divide ``embed_dim`` unless ``head_dim`` is given.
        num_kv_heads: key/value heads ``H_kv`` (default ``H``); must divide ``num_heads``.
        head_dim: size ``D`` of each head (default ``C / H``). Some models choose it freely (T5's
            ``d_kv``, e.g. T5-3B: ``C = 1024``, ``H = 32``, ``D = 128``; Gemma): the projections then
            map ``C`` to ``H·D`` and ``out_proj`` maps ``H·D`` back to ``C``.
        bias: whether the four projections have a bias (Llama: no; GPT-2, BERT: yes).
        kdim, vdim: feature sizes of ``key`` and ``value`` in cross-attention (default ``embed_dim``).
        scale: multiplies ``q·k`` before the softmax; ``None`` means ``1/sqrt(D)``. T5 uses ``1.0``
            (it folds the scale into its weights).
        attention_fn: any ``fn(q, k, v, mask=None, *, is_causal=False, scale=None)``; default the
            reference :func:`attn_edu.attention.scaled_dot_product_attention`. ``score_bias=`` is
            passed only when a bias is given, so other implementations need not accept it.
        rotary: optional module called as ``q, k = rotary(q, k, offset=offset)`` after the
            projections and before caching, e.g. :class:`attn_edu.rope.RotaryEmbedding`.
        qk_norm: optional module called as ``q, k = qk_norm(q, k)`` right after the projections (before
            ``rotary`` and the cache), e.g. :class:`attn_edu.qk_norm.QKNorm`.
        output_gate: optional module called as ``merged = output_gate(query, merged)`` on the concatenated
            head outputs before ``out_proj``, e.g. :class:`attn_edu.gating.OutputGate` (gated attention).
        window: optional causal sliding window (Mistral 7B, Jiang et al., 2023, section 2): each query
            sees itself and the ``window - 1`` keys before it, and nothing older
            (:func:`attn_edu.sparse.sliding_window_mask`, applied after the cache has been updated).
            With a cache of ``window`` slots (:class:`attn_edu.kv_cache.RollingKVCacheLayer`) the
            memory stays constant however long the generation.

    Mask polarity: ``mask`` is bool with ``True`` = *may attend* (:mod:`attn_edu.masks`), the opposite
    of :class:`torch.nn.MultiheadAttention`'s ``attn_mask`` / ``key_padding_mask`` (``True`` = *ignore*);
    :func:`attn_edu.masks.to_torch_polarity` converts. A query with no visible key returns zeros.

    Shapes:
        query ``(B, T, C)``; key ``(B, S, kdim)``; value ``(B, S, vdim)``; mask broadcastable to
        ``(B, H, T, S)`` (e.g. ``(T, S)`` or ``(B, 1, 1, S)``); returns ``(B, T, C)``, and with
        ``need_weights=True`` also the per-head weights ``(B, H, T, S)``.

    Example:
        >>> mha = MultiHeadAttention(embed_dim=12, num_heads=3, num_kv_heads=1)
        >>> x = torch.randn(2, 5, 12)
        >>> out, weights = mha(x, is_causal=True, need_weights=True)
        >>> out.shape, weights.shape           # (B, T, C), (B, H, T, S)
        (torch.Size([2, 5, 12]), torch.Size([2, 3, 5, 5]))
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        scale: float | None = None,
        attention_fn: AttentionFn = scaled_dot_product_attention,
        rotary: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None,
        window: int | None = None,
        qk_norm: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
        output_gate: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("num_heads", num_heads)
        num_kv_heads = num_heads if num_kv_heads is None else check_positive_int("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads: must divide num_heads={num_heads} (each kv head serves a whole group "
                f"of query heads), got num_kv_heads={num_kv_heads}"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = check_head_dim(embed_dim, num_heads, head_dim)
        self.inner_dim = num_heads * self.head_dim  # H · D: equals embed_dim unless head_dim was chosen
        self.queries_per_kv = num_heads // num_kv_heads  # query heads sharing one kv head
        self.kdim = embed_dim if kdim is None else check_positive_int("kdim", kdim)
        self.vdim = embed_dim if vdim is None else check_positive_int("vdim", vdim)
        self.scale = check_scale(scale, self.head_dim)
        self.attention_fn = attention_fn
        self.rotary = rotary
        self.window = None if window is None else check_positive_int("window", window)

        kv_width = num_kv_heads * self.head_dim  # smaller than embed_dim under GQA
        self.q_proj = nn.Linear(embed_dim, self.inner_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, kv_width, bias=bias)
        self.v_proj = nn.Linear(self.vdim, kv_width, bias=bias)
        self.out_proj = nn.Linear(self.inner_dim, embed_dim, bias=bias)
        self.qk_norm = qk_norm  # after the projections: a module here prints and saves after them
        self.output_gate = output_gate
        # Cross-layer KV sharing (attn_edu.kv_sharing): a later layer reads the keys and values this one used.
        self.keep_kv = False
        self.kept_kv: tuple[torch.Tensor, torch.Tensor] | None = None

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}, scale={self.scale:.4g}"
            + ("" if self.window is None else f", window={self.window}")
        )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        score_bias: torch.Tensor | None = None,
        kv_cache: SupportsKVCache | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``query`` to ``key``/``value`` (self-attention when both are omitted).

        ``key`` defaults to ``query`` and ``value`` to ``key``. ``mask`` is bool, ``True`` = may attend;
        ``is_causal`` is bottom-right aligned, so it stays right when a cache makes ``S > T``.
        ``score_bias`` (float, broadcastable to ``(B, H, T, S)``) is added to the scaled scores
        (T5's relative bias, ALiBi). With ``kv_cache``, the new keys/values are appended to it and
        the queries attend to everything cached; its ``seq_len`` is the rotary position offset.
        ``need_weights=True`` also returns the weights, recomputed with
        :func:`attn_edu.attention.attention_weights` (the module keeps no attention maps).

        The same as ``attend(query, *project_kv(key, value), ...)``: an encoder-decoder projects its
        encoder output once with :meth:`project_kv` and calls :meth:`attend` at every decoding step.

        Shapes:
            query ``(B, T, C)``, key ``(B, S, kdim)``, value ``(B, S, vdim)``; returns ``(B, T, C)``
            [and weights ``(B, H, T, S)``; with a cache ``S`` counts the cached tokens too].
        """
        key = query if key is None else key
        self._check_query(query)
        # (B, H_kv, S, D) each: right by construction, so _attend checks them no more
        k, v = self.project_kv(key, value, batch=query.shape[0])
        return self._attend(query, k, v, mask, is_causal, score_bias, kv_cache, need_weights)

    def project_kv(
        self, key: torch.Tensor, value: torch.Tensor | None = None, *, batch: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of ``key``/``value`` (``value`` defaults to ``key``), split into ``H_kv`` heads.

        Shapes:
            key ``(B, S, kdim)``, value ``(B, S, vdim)``; returns k, v ``(B, H_kv, S, D)``.

        Example:
            >>> mha = MultiHeadAttention(8, 4, num_kv_heads=2)
            >>> memory, x = torch.randn(1, 7, 8), torch.randn(1, 3, 8)
            >>> k, v = mha.project_kv(memory)
            >>> k.shape, torch.allclose(mha.attend(x, k, v), mha(x, memory), atol=1e-6)
            (torch.Size([1, 2, 7, 2]), True)
        """
        value = key if value is None else value
        check_floating("key", key)
        check_floating("value", value)
        B = check_shape("key", key, "B S C", C=self.kdim, **({} if batch is None else {"B": batch}))["B"]
        S = key.shape[1]
        check_shape("value", value, "B S C", B=B, S=S, C=self.vdim)
        k = split_heads(self.k_proj(key), self.num_kv_heads)  # (B, H_kv, S, D)
        v = split_heads(self.v_proj(value), self.num_kv_heads)  # (B, H_kv, S, D)
        return k, v

    def attend(
        self,
        query: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        score_bias: torch.Tensor | None = None,
        kv_cache: SupportsKVCache | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` from keys and values already projected by :meth:`project_kv`.

        Shapes:
            query ``(B, T, C)``, k, v ``(B, H_kv, S, D)``; returns ``(B, T, C)`` [and weights ``(B, H, T, S)``].
        """
        B = self._check_query(query)["B"]
        H_kv, D = self.num_kv_heads, self.head_dim
        S = check_shape("k", k, "B H_kv S D", B=B, H_kv=H_kv, D=D)["S"]
        check_shape("v", v, "B H_kv S D", B=B, H_kv=H_kv, S=S, D=D)
        return self._attend(query, k, v, mask, is_causal, score_bias, kv_cache, need_weights)

    def _check_query(self, query: torch.Tensor) -> dict[str, int]:
        check_floating("query", query)
        return check_shape("query", query, "B T C", C=self.embed_dim)

    def _attend(
        self,
        query: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
        score_bias: torch.Tensor | None,
        kv_cache: SupportsKVCache | None,
        need_weights: bool,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """:meth:`attend` once ``query``, ``k`` and ``v`` are checked (by it, or by :meth:`forward`)."""
        B, T, _ = query.shape
        H, H_kv, D = self.num_heads, self.num_kv_heads, self.head_dim
        S = k.shape[2]
        q = split_heads(self.q_proj(query), H)  # (B, H, T, D)
        if self.qk_norm is not None:
            q, k = self.qk_norm(q, k)  # (B, H, T, D), (B, H_kv, S, D): the new keys only, before caching
        # Positions continue after the cached tokens, so rotate before the keys enter the cache:
        # cached keys already carry their own positions. A streaming cache (StreamingLLM) counts positions
        # in the cache instead: it stores the keys unrotated, and they turn each time they are read.
        offset = 0 if kv_cache is None else int(kv_cache.seq_len)
        in_cache = getattr(kv_cache, "positions_in_cache", False)
        if self.rotary is not None and not in_cache:
            q, k = self.rotary(q, k, offset=offset)  # (B, H, T, D), (B, H_kv, S, D)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H_kv, S, D) with S = offset + new tokens
            S = check_shape("kv_cache.update(k, v)[0]", k, "B H_kv S D", B=B, H_kv=H_kv, D=D)["S"]
            check_shape("kv_cache.update(k, v)[1]", v, "B H_kv S D", B=B, H_kv=H_kv, S=S, D=D)
        if self.rotary is not None and in_cache:  # the keys at 0 .. S-1, the new queries the last T
            q, k = self.rotary.rotate(q, offset=S - T), self.rotary.rotate(k)  # (B, H, T, D), (B, H_kv, S, D)
        if self.keep_kv:  # rotated, every cached token included, H_kv heads: what a sharing layer reads
            self.kept_kv = (k, v)
        self._check_mask_and_bias(mask, score_bias, (B, H, T, S))
        if self.window is not None:
            # The band of the last `window` positions, bottom-right aligned over the S keys now held.
            band = sliding_window_mask(T, S, window=self.window, device=query.device)  # (T, S)
            mask = combine_masks(mask, band)
        # The cache holds H_kv heads; repeat them only now, for the attention product itself.
        k = repeat_kv(k, self.queries_per_kv)  # (B, H, S, D)
        v = repeat_kv(v, self.queries_per_kv)  # (B, H, S, D)

        extra = {} if score_bias is None else {"score_bias": score_bias}
        heads = self.attention_fn(
            q, k, v, mask, is_causal=is_causal, scale=self.scale, **extra
        )  # (B, H, T, D)
        merged = merge_heads(heads)  # (B, T, H·D)
        if self.output_gate is not None:
            merged = self.output_gate(query, merged)  # (B, T, H·D)
        out = self.out_proj(merged)  # (B, T, C)
        if not need_weights:
            return out
        sinks = getattr(self.attention_fn, "sinks", None)  # an attention_fn with learned sinks (gating.py)
        weights = attention_weights(
            q, k, mask, is_causal=is_causal, scale=self.scale, score_bias=score_bias, sinks=sinks
        )  # (B, H, T, S)
        return out, weights

    @staticmethod
    def _check_mask_and_bias(
        mask: torch.Tensor | None, score_bias: torch.Tensor | None, scores_shape: tuple[int, ...]
    ) -> None:
        """Fail here, with our names, rather than inside whichever ``attention_fn`` is plugged in."""
        if mask is not None:
            check_mask("mask", mask, scores_shape, "(B, H, T, S)")
        if score_bias is not None:
            check_floating("score_bias", score_bias)
            check_broadcast("score_bias", tuple(score_bias.shape), scores_shape, "(B, H, T, S)")

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy a :class:`torch.nn.MultiheadAttention` so that both give the same output.

        Torch packs the three input projections into one ``in_proj_weight`` ``(3C, C)`` (rows: q, then
        k, then v) when ``kdim == vdim == embed_dim``, and keeps ``q_proj_weight``, ``k_proj_weight``,
        ``v_proj_weight`` apart otherwise; both layouts are handled. Differences to keep in mind:

        - Our module is always batch-first. A torch module built with ``batch_first=False`` takes
          ``(T, B, C)``: transpose its inputs (``x.transpose(0, 1)``) before calling ours.
        - Mask polarity is opposite: torch's ``attn_mask`` / ``key_padding_mask`` use ``True`` = ignore,
          ours ``True`` = may attend. ``key_padding_mask`` ``(B, S)`` becomes
          ``attn_edu.masks.key_mask(~key_padding_mask)``; a bool ``attn_mask`` ``(T, S)`` becomes ``~attn_mask``.
        - Attention dropout is not copied (ours has none): outputs agree in ``eval()`` mode.
        - ``add_bias_kv`` and ``add_zero_attn`` (extra learned / zero key positions) are refused.

        Example:
            >>> torch_mha = nn.MultiheadAttention(8, 2, batch_first=True)
            >>> mha = MultiHeadAttention.from_torch(torch_mha)
            >>> x = torch.randn(1, 3, 8)
            >>> torch.allclose(mha(x), torch_mha(x, x, x)[0], atol=1e-6)
            True
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"mha: expected a torch.nn.MultiheadAttention, got {type(mha).__name__}")
        if mha.bias_k is not None or mha.bias_v is not None:
            raise ValueError("mha: add_bias_kv=True (learned extra key/value) is not supported")
        if mha.add_zero_attn:
            raise ValueError("mha: add_zero_attn=True (an extra all-zero key/value) is not supported")
        C = mha.embed_dim
        has_bias = mha.in_proj_bias is not None
        ours = cls(C, mha.num_heads, bias=has_bias, kdim=mha.kdim, vdim=mha.vdim)
        ours = ours.to(device=mha.out_proj.weight.device, dtype=mha.out_proj.weight.dtype)
        if mha.in_proj_weight is not None:
            q_weight, k_weight, v_weight = mha.in_proj_weight.split(C, dim=0)  # 3 x (C, C)
        else:
            q_weight, k_weight, v_weight = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
        with torch.no_grad():
            ours.q_proj.weight.copy_(q_weight)
            ours.k_proj.weight.copy_(k_weight)
            ours.v_proj.weight.copy_(v_weight)
            ours.out_proj.weight.copy_(mha.out_proj.weight)
            if has_bias:
                q_bias, k_bias, v_bias = mha.in_proj_bias.split(C, dim=0)  # 3 x (C,)
                ours.q_proj.bias.copy_(q_bias)
                ours.k_proj.bias.copy_(k_bias)
                ours.v_proj.bias.copy_(v_bias)
                ours.out_proj.bias.copy_(mha.out_proj.bias)
        return ours


def attention_parameter_count(
    embed_dim: int,
    num_heads: int,
    *,
    num_kv_heads: int | None = None,
    head_dim: int | None = None,
    bias: bool = True,
) -> int:
    """How many parameters a :class:`MultiHeadAttention` of these sizes holds, in closed form.

        q_proj, out_proj:  C x H·D weights each        k_proj, v_proj:  C x H_kv·D weights each
        biases (bias=True): one per output feature, H·D + C + 2 H_kv·D

    With ``H·D = C`` (the default ``D = C / H``) that is ``4C² + 4C`` for multi-head attention; under GQA
    and MQA (Ainslie et al., 2023, section 2.2) only ``k_proj`` and ``v_proj`` shrink, to ``H_kv·D``
    outputs. ``tests/test_multihead.py`` checks the formula against the module's own tensors.

    Shapes:
        sizes only (the arguments of :class:`MultiHeadAttention`); returns a Python int.

    Example:
        >>> attention_parameter_count(512, 8)                                 # the base Transformer: 4C² + 4C
        1050624
        >>> attention_parameter_count(4096, 32, num_kv_heads=8, bias=False)   # a Llama-3-8B layer
        41943040
    """
    check_positive_int("embed_dim", embed_dim)
    check_positive_int("num_heads", num_heads)
    num_kv_heads = num_heads if num_kv_heads is None else check_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads: must divide num_heads={num_heads}, got num_kv_heads={num_kv_heads}")
    if not isinstance(bias, bool):
        raise ValueError(f"bias: expected True or False, got {bias!r}")
    D = check_head_dim(embed_dim, num_heads, head_dim)
    q_width, kv_width = num_heads * D, num_kv_heads * D  # H·D (C by default) and H_kv·D
    weights = 2 * embed_dim * q_width + 2 * embed_dim * kv_width  # q_proj, out_proj | k_proj, v_proj
    biases = q_width + embed_dim + 2 * kv_width if bias else 0  # q_proj, out_proj | k_proj, v_proj
    return weights + biases
