"""The attention sink, measured: how much attention lands on the first token, and the activation that goes with it.

Trained softmax models send a large share of many heads' attention to the first token, whatever it is
(Xiao et al., 2024, "Efficient Streaming Language Models with Attention Sinks", §3.1, Figure 2): a row must
sum to 1, and a head with nothing to read parks its weight where every query can see it. The residual
stream at that position grows far larger than elsewhere (Sun et al., 2024, "Massive Activations in Large
Language Models", §2), which keeps its keys easy to find. :mod:`attn_edu.gating` holds the two 2025
mechanisms that make the sink unnecessary; this module measures it, on any model whose attention is
:class:`attn_edu.multihead.MultiHeadAttention` and whose layers are ``model.blocks``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attn_edu._validate import check_floating, check_shape
from attn_edu.differential import DifferentialAttention
from attn_edu.interp import attention_maps


def first_token_mass(weights: torch.Tensor) -> torch.Tensor:
    """Each head's mean weight on the first key, over the queries that can see another key (all but the first).

    Query 0 of a causal model sees only key 0 and must give it weight 1, so it is left out; a head that
    spreads evenly over ``t + 1`` visible keys scores ``mean(1 / (t + 1))``, a sink head near 1.

    Shapes:
        weights ``(B, H, T, S)`` with ``T >= 2``; returns ``(H,)``.

    Example:
        >>> causal_uniform = torch.tril(torch.ones(4, 4)) / torch.arange(1, 5)[:, None]   # (T, S)
        >>> first_token_mass(causal_uniform.expand(1, 2, 4, 4))        # mean of 1/2, 1/3, 1/4
        tensor([0.3611, 0.3611])
    """
    check_floating("weights", weights)
    T = check_shape("weights", weights, "B H T S")["T"]
    if T < 2:
        raise ValueError(f"weights: expected at least 2 queries (the first one is left out), got T = {T}")
    return weights[:, :, 1:, 0].float().mean(dim=(0, 2))  # (H,)


def sink_profile(model: nn.Module, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
    """One forward pass of ``model(*args, **kwargs)``: every head's first-token mass, and the residual stream's
    size at each position after the embedding and after each block.

    Returns ``{"mass": (L, H), "norms": (L + 1, T)}``: ``mass[l, h]`` is :func:`first_token_mass` of layer
    ``l``'s head ``h`` (for :class:`attn_edu.differential.DifferentialAttention`, of output head ``h``'s
    difference map ``w1 − λ·w2``: ``H`` is then half the query heads); ``norms[l, t]`` is the mean (over the
    batch) Euclidean norm of position ``t``'s residual vector entering block ``l`` (row ``L``: leaving the last
    block).

    Example:
        >>> from attn_edu.models import GPT, GPTConfig
        >>> model = GPT(GPTConfig(vocab_size=10, max_seq_len=8, embed_dim=16, num_heads=2, num_layers=3)).eval()
        >>> profile = sink_profile(model, torch.randint(10, (2, 8)))
        >>> profile["mass"].shape, profile["norms"].shape
        (torch.Size([3, 2]), torch.Size([4, 8]))
    """
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise ValueError(
            f"model: expected a model with its layers in `model.blocks`, got {type(model).__name__}"
        )
    states: list[torch.Tensor] = []

    def entering(_module: nn.Module, inputs: tuple[Any, ...]) -> None:
        states.append(inputs[0].detach())  # (B, T, C)

    def leaving(_module: nn.Module, _inputs: tuple[Any, ...], output: Any) -> None:
        states.append((output[0] if isinstance(output, tuple) else output).detach())  # (B, T, C)

    hooks = [blocks[0].register_forward_pre_hook(entering)]
    hooks += [block.register_forward_hook(leaving) for block in blocks]
    differential = [m for m in model.modules() if isinstance(m, DifferentialAttention)]
    maps: list[torch.Tensor] = []

    def difference_map(
        module: nn.Module, inputs: tuple[Any, ...], options: dict[str, Any], _output: Any
    ) -> None:
        maps.append(module.forward(*inputs, **options, need_weights=True)[1])  # (B, H/2, T, S): w1 − λ·w2

    hooks += [m.register_forward_hook(difference_map, with_kwargs=True) for m in differential]
    try:
        with torch.no_grad():
            if differential:
                model(*args, **kwargs)
            else:
                maps = attention_maps(model, *args, **kwargs)  # L x (B, H, T, S)
    finally:
        for hook in hooks:
            hook.remove()
    mass = torch.stack([first_token_mass(w) for w in maps])  # (L, H)
    norms = torch.stack([state.float().norm(dim=-1).mean(dim=0) for state in states])  # (L + 1, T)
    return {"mass": mass, "norms": norms}


__all__ = ["first_token_mass", "sink_profile"]
