"""Reading a trained model's attention: head scores for known patterns, and head ablation.

Attention patterns give hypotheses; ablations test them (Jain & Wallace, 2019, "Attention is not
Explanation"; Wiegreffe & Pinter, 2019). Four pattern scores, each the mean attention weight that a
head puts where the pattern says it should:

- **previous token**: query ``t`` → key ``t − 1``;
- **induction** on a sequence repeated with period ``P``: query ``t`` → key ``t − P + 1``, the token
  *after* the previous occurrence of the current token (Olsson et al., 2022, "In-context Learning and
  Induction Heads", section 2; Elhage et al., 2021). A two-layer circuit: a previous-token head in
  layer 1 writes "my predecessor was A" into each position; an induction head in layer 2 then looks
  for the key whose predecessor equals its own token;
- **first token**: query ``t`` → key ``0`` (a resting place when nothing else is relevant).
- **current token**: query ``t`` → key ``t``, its own token.

Uniform causal attention puts ``1 / (t + 1)`` on every key, so that is the chance level of each score.

Ablation zeroes a head's output before the output projection ``W^O`` (Michel et al., 2019, "Are
Sixteen Heads Really Better than One?", section 2): the other heads and the residual stream are
untouched, and the loss change measures how much the model needed that head.

Shapes:
    weights ``(B, H, T, S)`` from ``need_weights=True``; scores ``(H,)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_shape
from attn_edu.attention import attention_entropy, attention_weights
from attn_edu.multihead import MultiHeadAttention


def _diagonal_mean(weights: torch.Tensor, offset: int) -> torch.Tensor:
    """Mean over batch and queries ``t >= offset`` of ``weights[..., t, t - offset]``, per head."""
    check_floating("weights", weights)
    B, H, T, S = check_shape("weights", weights, "B H T S").values()
    if offset >= T:
        raise ValueError(f"weights: T={T} queries leave no query at distance {offset} back")
    shift = S - T  # bottom-right alignment: query t sits at absolute position shift + t
    diagonal = weights.diagonal(offset=shift - offset, dim1=-2, dim2=-1)  # (B, H, T - offset)
    return diagonal.float().mean(dim=(0, 2))  # (H,)


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight each head puts on the previous token (queries ``t >= 1``).

    Shapes:
        weights ``(B, H, T, S)``; returns ``(H,)``.

    Example:
        >>> w = torch.zeros(1, 1, 3, 3); w[0, 0, 0, 0] = w[0, 0, 1, 0] = w[0, 0, 2, 1] = 1
        >>> previous_token_score(w)
        tensor([1.])
    """
    return _diagonal_mean(weights, 1)


def induction_score(weights: torch.Tensor, period: int) -> torch.Tensor:
    """Mean weight each head puts on the token after the previous occurrence: key ``t − period + 1``.

    Only queries ``t >= period`` (the repeats) count. Chance level for uniform causal attention is
    the mean of ``1 / (t + 1)`` over those queries.

    Shapes:
        weights ``(B, H, T, S)``; returns ``(H,)``.

    Example:
        >>> T, P = 6, 3
        >>> w = torch.zeros(1, 1, T, T)
        >>> for t in range(T): w[0, 0, t, max(t - P + 1, 0)] = 1.0
        >>> induction_score(w, P)
        tensor([1.])
    """
    check_positive_int("period", period)
    if period < 2:
        raise ValueError(f"period: expected a repeat period >= 2, got {period}")
    return _diagonal_mean(weights[..., period:, :], period - 1)


def first_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight each head puts on the first key, over all queries.

    Shapes:
        weights ``(B, H, T, S)``; returns ``(H,)``.

    Example:
        >>> first_token_score(torch.full((1, 2, 4, 4), 0.25))
        tensor([0.2500, 0.2500])
    """
    check_floating("weights", weights)
    check_shape("weights", weights, "B H T S")
    return weights[..., 0].float().mean(dim=(0, 2))  # (H,)


def current_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight each head puts on the query's own token (key ``t`` for query ``t``), over all queries.

    Shapes:
        weights ``(B, H, T, S)``; returns ``(H,)``.

    Example:
        >>> current_token_score(torch.eye(3).expand(1, 2, 3, 3))
        tensor([1., 1.])
    """
    return _diagonal_mean(weights, 0)


def real_queries(weights: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """``(B, T)`` float: 1 for the queries a score averages over (the real tokens), 0 for padding."""
    B, _, T, S = check_shape("weights", weights, "B H T S").values()
    if attention_mask is None:
        return torch.ones(B, T, device=weights.device)
    check_shape("attention_mask", attention_mask, "B S", B=B, S=S)
    return attention_mask[:, S - T :].to(torch.float32)  # (B, T): queries are the last T positions


def relative_position_score(
    weights: torch.Tensor, offset: int, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean weight each head puts on the key ``offset`` positions from the query (−1: previous, +1: next).

    For real sentences in a padded batch, pass the batch's ``attention_mask`` (1 = real token): only real
    queries whose key at that offset is real count. Queries sit bottom-right (query ``t`` at position
    ``S − T + t``), as everywhere in the course.

    Shapes:
        weights ``(B, H, T, S)``, attention_mask ``(B, S)``; returns ``(H,)``.

    Example:
        >>> w = torch.eye(4)[None, None].roll(1, dims=-1)          # every query reads the next key
        >>> relative_position_score(w, +1), relative_position_score(w, -1)
        (tensor([1.]), tensor([0.]))
    """
    check_floating("weights", weights)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise ValueError(f"offset: expected an int (−1 previous token, +1 next), got {offset!r}")
    B, H, T, S = check_shape("weights", weights, "B H T S").values()
    real = real_queries(weights, attention_mask)  # (B, T)
    keys = torch.arange(T, device=weights.device) + (S - T) + offset  # (T,) the key each query is scored on
    inside = (keys >= 0) & (keys < S)  # (T,)
    if not bool(inside.any()):
        raise ValueError(f"offset: {offset} puts every key outside 0 .. S - 1 = {S - 1}")
    keys = keys.clamp(0, S - 1)
    picked = weights.float().gather(-1, keys.expand(B, H, T)[..., None]).squeeze(-1)  # (B, H, T)
    valid = real * inside  # (B, T)
    if attention_mask is not None:
        valid = valid * attention_mask.to(torch.float32).gather(1, keys.expand(B, T))  # the key is real too
    count = valid.sum().clamp(min=1.0)
    return (picked * valid[:, None]).sum(dim=(0, 2)) / count  # (H,)


def key_set_score(
    weights: torch.Tensor, is_key: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean total weight each head puts on a set of keys (``[CLS]``, ``[SEP]``, punctuation, ...).

    ``is_key[b, s]`` marks the keys of the set; the score averages, over the real queries, the weight that
    falls on them. Uniform attention over ``n`` real keys of which ``k`` are in the set scores ``k / n``.

    Shapes:
        weights ``(B, H, T, S)``, is_key ``(B, S)`` bool, attention_mask ``(B, S)``; returns ``(H,)``.

    Example:
        >>> w = torch.full((1, 2, 3, 3), 1 / 3)
        >>> key_set_score(w, torch.tensor([[True, False, False]]))   # uniform: 1 key of 3
        tensor([0.3333, 0.3333])
    """
    check_floating("weights", weights)
    B, H, T, S = check_shape("weights", weights, "B H T S").values()
    check_shape("is_key", is_key, "B S", B=B, S=S)
    if is_key.dtype != torch.bool:
        raise ValueError(f"is_key: expected a bool tensor (True = in the set), got dtype {is_key.dtype}")
    real = real_queries(weights, attention_mask)  # (B, T)
    on_set = (weights.float() * is_key[:, None, None, :]).sum(-1)  # (B, H, T)
    return (on_set * real[:, None]).sum(dim=(0, 2)) / real.sum().clamp(min=1.0)  # (H,)


def head_entropy(weights: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean entropy (nats) of each head's rows over the real queries: high for broad heads, 0 for one-hot ones.

    Shapes:
        weights ``(B, H, T, S)``, attention_mask ``(B, S)``; returns ``(H,)``.

    Example:
        >>> head_entropy(torch.full((1, 1, 4, 4), 0.25))          # uniform over 4 keys: log 4
        tensor([1.3863])
    """
    check_floating("weights", weights)
    real = real_queries(weights, attention_mask)  # (B, T)
    rows = attention_entropy(weights.float())  # (B, H, T)
    return (rows * real[:, None]).sum(dim=(0, 2)) / real.sum().clamp(min=1.0)  # (H,)


def attention_layers(model: nn.Module) -> list[MultiHeadAttention]:
    """The model's :class:`~attn_edu.multihead.MultiHeadAttention` modules, in layer order."""
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    if not layers:
        raise ValueError(f"model: {type(model).__name__} has no MultiHeadAttention modules")
    return layers


@torch.no_grad()
def attention_maps(model: nn.Module, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
    """Run ``model(*args, **kwargs)`` once and return every attention layer's weights, in module order.

    Works on any model built from :class:`~attn_edu.multihead.MultiHeadAttention` (the course's BERT, GPT,
    Llama, T5, ...) without changing its forward. For this one call each layer's ``attention_fn`` is wrapped
    by one that also computes the weights (:func:`attn_edu.attention.attention_weights`) of the very q, k
    and mask it receives: after the rotary embedding, the cache and the sliding window, and for
    cross-attention as well as self-attention, whichever way the layer was called. The model runs once, so a
    KV cache in the call is updated once.

    Shapes:
        returns one ``(B, H, T, S)`` tensor per attention layer.

    Example:
        >>> from attn_edu.models import BERT, BertConfig
        >>> model = BERT(BertConfig(vocab_size=20, embed_dim=16, num_heads=2, num_layers=2, ffn_dim=32)).eval()
        >>> maps = attention_maps(model, torch.tensor([[1, 5, 6, 2]]))
        >>> len(maps), maps[0].shape, bool(torch.allclose(maps[1].sum(-1), torch.ones(1, 2, 4)))
        (2, torch.Size([1, 2, 4, 4]), True)
    """

    def weights(
        original: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor, mask: Any, **options: Any
    ):
        # options: is_causal, scale and score_bias, exactly as the layer passes them; learned sinks too
        return attention_weights(q, k, mask, sinks=getattr(original, "sinks", None), **options)

    return _recorded(model, weights, args, kwargs)


@torch.no_grad()
def attention_inputs(model: nn.Module, *args: Any, **kwargs: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Run ``model(*args, **kwargs)`` once and return the ``(q, k)`` each attention layer received, in module
    order, as :func:`attention_maps` sees them: for what the weights alone do not give, such as a block's mean
    key (:func:`attn_edu.selection.block_topk_mask`).

    Shapes:
        returns one ``((B, H, T, D), (B, H_kv, S, D))`` pair per attention layer.
    """
    return _recorded(model, lambda original, q, k, mask, **options: (q, k), args, kwargs)


def _recorded(model: nn.Module, pick: Callable[..., Any], args: tuple, kwargs: dict) -> list[Any]:
    """Run the model once; for each attention layer keep ``pick(its attention_fn, q, k, mask, **options)``."""
    layers = attention_layers(model)
    kept: list[Any] = [None] * len(layers)

    def recorder(index: int, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def record(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any = None, **options: Any
        ) -> torch.Tensor:
            kept[index] = pick(original, q, k, mask, **options)
            return original(q, k, v, mask, **options)

        return record

    with attention_fns_wrapped(layers, recorder):
        model(*args, **kwargs)
    return [item for item in kept if item is not None]


@contextmanager
def attention_fns_wrapped(
    layers: list[MultiHeadAttention],
    wrap: Callable[[int, Callable[..., torch.Tensor]], Callable[..., torch.Tensor]],
) -> Iterator[None]:
    """Inside the block, ``layers[i].attention_fn`` is ``wrap(i, its own attention_fn)``; put back on exit,
    even after an error."""
    originals = [layer.attention_fn for layer in layers]
    try:
        for i, (layer, fn) in enumerate(zip(layers, originals)):
            if isinstance(fn, nn.Module):  # learned sinks: unregistered while wrapped
                del layer.attention_fn
            layer.attention_fn = wrap(i, fn)
        yield
    finally:
        for layer, fn in zip(layers, originals):
            layer.__dict__.pop("attention_fn", None)  # the wrapper; a module registers again
            layer.attention_fn = fn


@contextmanager
def gate_heads(attn: MultiHeadAttention, gate: torch.Tensor) -> Iterator[None]:
    """Inside the block, multiply head ``h``'s output by ``gate[h]`` before ``out_proj`` (0 = ablate).

    A forward pre-hook on ``attn.out_proj`` scales each head's ``D`` channels of the concatenated
    heads; the hook is removed on exit, even after an error.

    Shapes:
        gate ``(H,)``.

    Example:
        >>> attn = MultiHeadAttention(8, 2, bias=False)
        >>> x = torch.randn(1, 3, 8)
        >>> with gate_heads(attn, torch.zeros(2)):
        ...     attn(x).abs().max().item()
        0.0
    """
    check_shape("gate", gate, "H", H=attn.num_heads)
    per_channel = gate.to(attn.out_proj.weight.dtype).repeat_interleave(attn.head_dim)  # (H·D,)

    def scale_heads(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (args[0] * per_channel.to(args[0].device), *args[1:])  # (B, T, H·D)

    handle = attn.out_proj.register_forward_pre_hook(scale_heads)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def head_ablation(model: nn.Module, heads: Iterable[tuple[int, int]]) -> Iterator[None]:
    """Zero the output of the given ``(layer, head)`` pairs while the block runs.

    Layers are counted in the order of :func:`attention_layers` (the model's layer order).

    Example:
        >>> from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
        >>> model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=10, embed_dim=8, num_heads=2))
        >>> ids = torch.tensor([[1, 2, 3]])
        >>> with head_ablation(model, [(0, 0), (0, 1), (1, 0), (1, 1)]):   # every head off
        ...     no_heads = model(ids)
        >>> torch.allclose(no_heads, model(ids, head_mask=torch.zeros(2, 2)))
        True
    """
    layers = attention_layers(model)
    gates = [torch.ones(layer.num_heads) for layer in layers]
    for layer, head in heads:
        if not 0 <= layer < len(layers):
            raise ValueError(f"heads: layer {layer} is out of range, the model has {len(layers)} layers")
        if not 0 <= head < layers[layer].num_heads:
            raise ValueError(
                f"heads: head {head} is out of range, layer {layer} has {layers[layer].num_heads}"
            )
        gates[layer][head] = 0.0
    with ExitStack() as stack:
        for attn, gate in zip(layers, gates):
            if not bool(gate.all()):
                stack.enter_context(gate_heads(attn, gate))
        yield


@torch.no_grad()
def ablation_effects(
    model: nn.Module, batch: Any, loss_fn: Callable[[nn.Module, Any], torch.Tensor]
) -> torch.Tensor:
    """Loss change when each head alone is ablated: ``loss(without head) − loss(full model)``.

    A large positive value means the model relies on that head for this batch.

    Shapes:
        returns ``(layers, H)``.

    Example:
        >>> from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
        >>> from attn_edu.train import lm_loss
        >>> from attn_edu.data import repeated_sequences
        >>> model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=10, embed_dim=8, num_heads=2))
        >>> ablation_effects(model, repeated_sequences(2, 4, vocab_size=10), lm_loss).shape
        torch.Size([2, 2])
    """
    layers = attention_layers(model)
    base = float(loss_fn(model, batch))
    effects = torch.zeros(len(layers), max(layer.num_heads for layer in layers))  # (layers, H)
    for i, layer in enumerate(layers):
        for h in range(layer.num_heads):
            with head_ablation(model, [(i, h)]):
                effects[i, h] = float(loss_fn(model, batch)) - base
    return effects


def head_masks_in_order(order: torch.Tensor | Iterable[int], num_layers: int, num_heads: int) -> torch.Tensor:
    """Head masks that switch heads off one at a time, in ``order``: row ``k`` has the first ``k`` off.

    ``order`` lists flat head indices ``layer · num_heads + head``, each once. Row 0 is the full model
    (all ones) and the last row has every listed head removed, so a pruning curve is the loss on each
    row (with :func:`head_ablation`, or a model's ``head_mask``-style gate).

    Shapes:
        order ``(L·H,)`` (or fewer, for a partial schedule); returns ``(len(order) + 1, L, H)`` float32.

    Example:
        >>> head_masks_in_order([3, 0], num_layers=2, num_heads=2).flatten(1).tolist()
        [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]]
    """
    check_positive_int("num_layers", num_layers)
    check_positive_int("num_heads", num_heads)
    flat = torch.as_tensor(order if isinstance(order, torch.Tensor) else list(order), dtype=torch.long)
    total = num_layers * num_heads
    if (
        flat.ndim != 1
        or len(set(flat.tolist())) != len(flat)
        or not all(0 <= i < total for i in flat.tolist())
    ):
        raise ValueError(
            f"order: expected distinct flat head indices in 0 .. {total - 1} (layer · {num_heads} + head), "
            f"got {flat.tolist()}"
        )
    masks = torch.ones(len(flat) + 1, total)  # (k + 1, L·H): row k has k heads removed
    for k, index in enumerate(flat.tolist(), start=1):
        masks[k:, index] = 0.0
    return masks.reshape(len(flat) + 1, num_layers, num_heads)  # (k + 1, L, H)


def pruning_masks(importance: torch.Tensor) -> torch.Tensor:
    """A pruning schedule: remove heads one by one, least important first (Michel et al., 2019, §4).

    ``importance[l, h]`` is what head ``h`` of layer ``l`` is worth (e.g. :func:`ablation_effects`: the
    loss rise without it). A negative value means the model does better without the head, so it goes
    first. Ties keep the (layer, head) order, so the schedule is reproducible.

    Shapes:
        importance ``(L, H)``; returns ``(L·H + 1, L, H)``: row ``k`` has the ``k`` least important heads off.

    Example:
        >>> masks = pruning_masks(torch.tensor([[0.3, -0.1], [0.0, 2.0]]))
        >>> masks[1].tolist(), masks[2].tolist()     # the harmful head goes first, then the idle one
        ([[1.0, 0.0], [1.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]])
    """
    check_floating("importance", importance)
    L, H = check_shape("importance", importance, "L H").values()
    order = torch.argsort(importance.flatten(), stable=True)  # (L·H,) flat index = layer·H + head
    return head_masks_in_order(order, L, H)


# Jain & Wallace's two tests of attention as explanation live in attn_edu.explanation; these names stay importable
# from here, as notebooks and older code import them.
_EXPLANATION = (
    "attention_received",
    "leave_one_out",
    "kendall_tau",
    "shuffled_attention",
    "uniform_attention",
    "replaced_attention",
)


def __getattr__(name: str) -> Any:
    if name in _EXPLANATION:
        from attn_edu import explanation

        return getattr(explanation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
