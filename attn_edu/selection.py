"""Learned key selection: each query attends only to the keys a cheap scorer picks (notebook 11).

The 2020 sparse patterns (:mod:`attn_edu.sparse`) fix *where* a query may look before seeing the text. The
2025 methods let the content decide, and still keep only ``k`` keys per query:

1. **Top-k of any scores** (:func:`topk_mask`): keep each query's ``k`` best visible keys. With the true
   attention scores as the scorer (:func:`topk_attention`) this is the best any selection of ``k`` keys can do,
   and it costs the full ``T × S`` scores: it is the yardstick.
2. **DeepSeek-V3.2's lightning indexer** (DeepSeek-AI, 2025, "DeepSeek-V3.2", §2.1): a few small heads with one
   shared key and ReLU instead of softmax, ``I(t, s) = Σ_h w_{t,h} · ReLU(q_{t,h} · k_s)``
   (:func:`index_scores`, :class:`LightningIndexer`). It still scores every key, but in a few FP8 dimensions
   instead of the main attention's many heads; the main attention then reads only the top 2,048.
3. **MoBA's block selection** (Lu et al., 2025, "MoBA: Mixture of Block Attention"): keys in blocks of ``b``;
   a query scores each earlier block by its dot product with the block's mean key, keeps the top ``k`` blocks
   and always its own block (causal inside it) (:func:`block_topk_mask`, :func:`moba_attention`). Scoring
   costs ``S / b`` dot products per query instead of ``S``.

:func:`attention_recall` measures what a selection keeps: the share of each query's true attention mass on
the selected keys. Masks are boolean, ``True`` = may attend, and causal alignment is bottom-right, as
everywhere in the package.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_qkv, check_shape
from attn_edu.attention import attention_weights, scaled_dot_product_attention
from attn_edu.masks import causal_mask
from attn_edu.rope import RotaryEmbedding
from attn_edu.sparse import sliding_window_mask


def topk_mask(scores: torch.Tensor, top_k: int, *, is_causal: bool = True) -> torch.Tensor:
    """Each query's ``top_k`` highest-scoring visible keys: a bool mask of ``scores``' shape (``True`` = kept).

    With ``is_causal`` only keys at or before the query's position (bottom-right) are candidates, and a query
    that sees fewer than ``top_k`` keys keeps all of them; no future key is ever selected.

    Shapes:
        scores ``(..., T, S)``; returns bool ``(..., T, S)``.

    Example:
        >>> scores = torch.tensor([[3.0, 0.0, 0.0], [1.0, 2.0, 0.0], [5.0, 4.0, 6.0]])
        >>> topk_mask(scores, 2).int()
        tensor([[1, 0, 0],
                [1, 1, 0],
                [1, 0, 1]], dtype=torch.int32)
    """
    check_floating("scores", scores)
    T, S = check_shape("scores", scores, "... T S").values()
    top_k = check_positive_int("top_k", top_k)
    if is_causal:
        visible = causal_mask(T, S, device=scores.device)  # (T, S)
        scores = scores.masked_fill(~visible, -torch.inf)  # (..., T, S)
    chosen = scores.topk(min(top_k, S), dim=-1).indices  # (..., T, k)
    mask = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, chosen, True)  # (..., T, S)
    return mask & visible if is_causal else mask


def index_scores(
    q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor, *, scale: float = 1.0
) -> torch.Tensor:
    """The lightning indexer's score of every key for every query: ``Σ_h w_{t,h} · ReLU(scale · q_{t,h} · k_s)``.

    ``H`` small indexer heads share one key per token (as MQA does); ReLU, not softmax, so a head that finds
    nothing adds nothing, and ``w`` (from the query's token) says how much to trust each head.

    Shapes:
        q ``(B, H, T, D)``, k ``(B, S, D)``, weights ``(B, T, H)``; returns ``(B, T, S)``, float32.

    Example:
        >>> q, k = torch.ones(1, 2, 1, 4), torch.tensor([[[1.0, 0, 0, 0], [-1.0, 0, 0, 0]]])
        >>> index_scores(q, k, torch.tensor([[[0.5, 2.0]]]))  # the second key scores ReLU(-1) = 0 in both heads
        tensor([[[2.5000, 0.0000]]])
    """
    for name, x in {"q": q, "k": k, "weights": weights}.items():
        check_floating(name, x)
    sizes = check_shape("q", q, "B H T D")
    check_shape("k", k, "B S D", B=sizes["B"], D=sizes["D"])
    check_shape("weights", weights, "B T H", B=sizes["B"], T=sizes["T"], H=sizes["H"])
    per_head = torch.relu(q.float() @ k.float()[:, None].transpose(-1, -2) * scale)  # (B, H, T, S)
    return torch.einsum("bth,bhts->bts", weights.float(), per_head)  # (B, T, S)


class LightningIndexer(nn.Module):
    """DeepSeek-V3.2's indexer: scores every key cheaply so that the main attention reads only the top ``k``.

    Its queries come from ``query_input`` (DeepSeek passes its compressed query latent; any ``(B, T, Cq)``
    tensor will do, the layer's input included), its one key head from ``x`` through a LayerNorm, and its head
    weights from ``x``. The first ``rotary_dim`` coordinates of queries and key turn with RoPE (half-split).
    Scores are :func:`index_scores` with ``scale = 1/√D`` and weights scaled by ``1/√H``, masked causally.

    Shapes:
        x ``(B, T, C)``, query_input ``(B, T, Cq)``; ``forward`` returns scores ``(B, T, T)``, ``select`` a bool
        mask ``(B, T, T)``.

    Example:
        >>> indexer = LightningIndexer(16, 8, num_heads=4, head_dim=8, rotary_dim=4)
        >>> x = torch.randn(2, 6, 16)
        >>> indexer.select(x, torch.randn(2, 6, 8), top_k=3).sum(-1)[0].tolist()  # keys kept per query
        [1, 2, 3, 3, 3, 3]
    """

    def __init__(
        self,
        embed_dim: int,
        query_dim: int,
        *,
        num_heads: int,
        head_dim: int,
        rotary_dim: int,
        base: float = 10000.0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        C, Cq = check_positive_int("embed_dim", embed_dim), check_positive_int("query_dim", query_dim)
        self.num_heads, self.head_dim = (
            check_positive_int("num_heads", num_heads),
            check_positive_int("head_dim", head_dim),
        )
        self.q_proj = nn.Linear(Cq, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(C, head_dim, bias=False)
        self.k_norm = nn.LayerNorm(head_dim, eps=eps)
        self.weights_proj = nn.Linear(C, num_heads, bias=False)
        self.rotary = RotaryEmbedding(head_dim, rotary_dim=rotary_dim, base=base)

    def forward(self, x: torch.Tensor, query_input: torch.Tensor) -> torch.Tensor:
        check_floating("x", x)
        B, T, _ = check_shape("x", x, "B T C", C=self.k_proj.in_features).values()
        check_shape("query_input", query_input, "B T Cq", B=B, T=T, Cq=self.q_proj.in_features)
        H, D = self.num_heads, self.head_dim
        q = self.q_proj(query_input).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_norm(self.k_proj(x))[:, None]  # (B, 1, T, D): one key head
        q, k = self.rotary(q, k)  # (B, H, T, D), (B, 1, T, D)
        weights = self.weights_proj(x) * H**-0.5  # (B, T, H)
        scores = index_scores(q, k[:, 0], weights, scale=D**-0.5)  # (B, T, T)
        return scores.masked_fill(~causal_mask(T, device=x.device), -torch.inf)  # (B, T, T)

    def select(self, x: torch.Tensor, query_input: torch.Tensor, top_k: int) -> torch.Tensor:
        """The ``top_k`` keys each query may read: bool ``(B, T, T)``."""
        with torch.no_grad():  # selection is discrete: no gradient flows through it (DeepSeek trains the
            return topk_mask(self(x, query_input), top_k)  # indexer apart, towards the attention's mass)

    @classmethod
    def from_hf(cls, indexer: nn.Module) -> LightningIndexer:
        """Copy a transformers ``DeepseekV32Indexer`` (its RoPE is the model's default, unscaled)."""
        config = indexer.config
        ours = cls(
            indexer.hidden_size,
            indexer.q_lora_rank,
            num_heads=indexer.n_heads,
            head_dim=indexer.head_dim,
            rotary_dim=indexer.qk_rope_head_dim,
            base=config.rope_parameters["rope_theta"],
            eps=indexer.k_norm.eps,
        )
        ours.load_state_dict(
            {
                "q_proj.weight": indexer.wq_b.weight,
                "k_proj.weight": indexer.wk.weight,
                "k_norm.weight": indexer.k_norm.weight,
                "k_norm.bias": indexer.k_norm.bias,
                "weights_proj.weight": indexer.weights_proj.weight,
            }
        )
        return ours


def block_topk_mask(q: torch.Tensor, k: torch.Tensor, *, block_size: int, top_k: int) -> torch.Tensor:
    """MoBA's causal block selection: each query keeps its own block and its ``top_k - 1`` best earlier ones.

    Keys fall in blocks of ``block_size`` (the last may be shorter). A query scores each block that lies wholly
    before its own by ``q · mean(keys of the block)``; it keeps its own block (causal inside it, bottom-right)
    and the best ``top_k - 1`` of those earlier blocks.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``; returns bool ``(..., T, S)``.

    Example:
        >>> q, k = torch.randn(1, 8, 4), torch.randn(1, 8, 4)
        >>> block_topk_mask(q, k, block_size=2, top_k=2).sum(-1).tolist()  # own block + one earlier block
        [[1, 2, 3, 4, 3, 4, 3, 4]]
    """
    sizes = check_qkv(q, k)
    T, S = sizes["T"], sizes["S"]
    size, top_k = check_positive_int("block_size", block_size), check_positive_int("top_k", top_k)
    n = -(-S // size)  # blocks, the last perhaps short
    block_of_key = torch.arange(S, device=q.device) // size  # (S,)
    members = block_of_key[None, :] == torch.arange(n, device=q.device)[:, None]  # (n, S)
    means = (members.to(k.dtype) @ k) / members.sum(-1, keepdim=True)  # (..., n, D): each block's mean key
    own = (torch.arange(T, device=q.device) + S - T).clamp(min=0) // size  # (T,): each query's block
    earlier = torch.arange(n, device=q.device)[None, :] < own[:, None]  # (T, n)
    gate = (q @ means.transpose(-1, -2)).masked_fill(~earlier, -torch.inf)  # (..., T, n)
    chosen = gate.topk(min(top_k - 1, n), dim=-1) if top_k > 1 else None
    blocks = torch.zeros_like(gate, dtype=torch.bool)  # (..., T, n)
    if chosen is not None:
        blocks = blocks.scatter(-1, chosen.indices, True) & earlier  # only blocks that lie before
    blocks = blocks | (torch.arange(n, device=q.device)[None, :] == own[:, None])  # (..., T, n): own block
    return blocks[..., block_of_key] & causal_mask(T, S, device=q.device)  # (..., T, S)


def topk_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    top_k: int,
) -> torch.Tensor:
    """Attention that reads only each query's ``top_k`` highest-scoring keys, chosen by the true scores of
    each head: the best any ``top_k``-key selection can do (the indexer tries to approach it cheaply).

    The course's attention signature (``functools.partial(topk_attention, top_k=32)`` is an ``attention_fn``).

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``; returns ``(..., T, Dv)``.
    """
    scores = attention_weights(
        q, k, mask, is_causal=is_causal, scale=scale
    )  # (..., T, S): their order is the scores'
    keep = topk_mask(scores, top_k, is_causal=is_causal) & (scores > 0)  # never a masked key
    return scaled_dot_product_attention(q, k, v, keep, scale=scale)  # (..., T, Dv)


def moba_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = True,
    scale: float | None = None,
    block_size: int,
    top_k: int,
) -> torch.Tensor:
    """Causal attention over the blocks :func:`block_topk_mask` selects (MoBA), in the course's signature.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``; returns ``(..., T, Dv)``.
    """
    if not is_causal:
        raise ValueError("is_causal: MoBA's block selection is causal; pass is_causal=True")
    keep = block_topk_mask(q, k, block_size=block_size, top_k=top_k)  # (..., T, S)
    return scaled_dot_product_attention(q, k, v, keep if mask is None else keep & mask, scale=scale)


def attention_recall(weights: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The share of each query's attention mass that falls on the kept keys: 1 means nothing was lost.

    Shapes:
        weights ``(..., T, S)`` (rows sum to 1), keep bool broadcastable to it; returns ``(..., T)``.

    Example:
        >>> attention_recall(torch.tensor([[0.7, 0.2, 0.1]]), torch.tensor([[True, False, True]]))
        tensor([0.8000])
    """
    check_floating("weights", weights)
    return (weights * keep).sum(-1)  # (..., T)


def recall_by_budget(
    q: torch.Tensor, k: torch.Tensor, budgets: Sequence[int], *, block_size: int = 8
) -> dict[str, list[float]]:
    """How much of causal attention's mass three selectors keep, for each budget of keys per query: the exact
    top-k of the true weights, MoBA's blocks of ``block_size`` (``budget / block_size`` blocks, its own
    included), and the latest ``budget`` keys (a sliding window). The mean over queries and heads.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``; every budget a multiple of ``block_size``.

    Example:
        >>> q, k = torch.randn(2, 32, 8), torch.randn(2, 32, 8)
        >>> recall = recall_by_budget(q, k, [8, 32])
        >>> [round(x, 3) for x in recall["latest k"]][-1], list(recall)
        (1.0, ['top-k', 'MoBA blocks', 'latest k'])
    """
    T, S = check_qkv(q, k)["T"], k.shape[-2]
    weights = attention_weights(q, k, is_causal=True)  # (..., T, S)
    result: dict[str, list[float]] = {"top-k": [], "MoBA blocks": [], "latest k": []}
    for budget in budgets:
        if check_positive_int("budgets", budget) % block_size:
            raise ValueError(f"budgets: each must be a multiple of block_size={block_size}, got {budget}")
        keeps = {
            "top-k": topk_mask(weights, budget),
            "MoBA blocks": block_topk_mask(q, k, block_size=block_size, top_k=budget // block_size),
            "latest k": sliding_window_mask(T, S, window=budget, device=q.device),
        }
        for name, keep in keeps.items():
            result[name].append(attention_recall(weights, keep).mean().item())
    return result


__all__ = [
    "LightningIndexer",
    "attention_recall",
    "block_topk_mask",
    "index_scores",
    "moba_attention",
    "recall_by_budget",
    "topk_attention",
    "topk_mask",
]
