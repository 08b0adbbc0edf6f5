"""Notebook 13 (interpretability): switch attention heads off and watch the loss and the patterns."""

from __future__ import annotations

from functools import partial

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_shape, check_tensor
from attn_edu.interp import attention_layers
from attn_edu.objectives import causal_lm_loss
from attn_edu.widgets.explorer import Explorer


def _ablation_view(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    heads: dict[str, tuple[int, int]],
    example: int,
    full_loss: float,
    **switched_off: bool,
) -> tuple[dict, Figure]:
    num_layers = 1 + max(layer for layer, _ in heads.values())
    num_heads = 1 + max(head for _, head in heads.values())
    head_mask = torch.ones(num_layers, num_heads)  # (L, H): 1 keeps a head, 0 zeroes its output
    ablated = [heads[name] for name, off in switched_off.items() if off]
    for layer, head in ablated:
        head_mask[layer, head] = 0.0
    with torch.no_grad():
        # logits (B, T, V); weights: one (B, H, T, S) tensor per layer
        logits, weights = model(input_ids, need_weights=True, head_mask=head_mask)
        loss = float(causal_lm_loss(logits, labels))
    shown = torch.stack([w[example] for w in weights]).float()  # (L, H, T, S)
    names = ", ".join(f"{layer}.{head}" for layer, head in ablated) or "none"
    title = f"heads off: {names}  ·  loss {loss:.3f} (all heads on: {full_loss:.3f})"
    state = {"ablated": ablated, "head_mask": head_mask, "loss": loss, "full_loss": full_loss}
    state["weights"] = shown
    return state, viz.plot_heads(shown, title=title)


def ablation_explorer(
    model: torch.nn.Module, input_ids: torch.Tensor, labels: torch.Tensor, *, example: int = 0
) -> Explorer:
    """Switch attention heads off with checkboxes; see the loss and every head's attention pattern.

    Each checkbox ``layer{l}_head{h}`` ablates one head (its output is zeroed before ``W^O``, as in
    :func:`attn_edu.interp.head_ablation`). The view runs ``model(input_ids, need_weights=True,
    head_mask=...)``, reports the next-token loss on ``labels`` (``-100`` = not scored, see
    :func:`attn_edu.objectives.causal_lm_loss`) and draws all heads of sequence ``example``. Heads that
    stay on can change their pattern too: a later layer reads what an ablated earlier head wrote.
    ``model`` must accept ``need_weights=`` and ``head_mask=`` (e.g.
    :class:`attn_edu.models.attention_only.AttentionOnlyTransformer`).

    Shapes:
        input_ids and labels ``(B, T)``; ``state["weights"]`` ``(L, H, T, S)``, ``state["head_mask"]`` ``(L, H)``.

    Example:
        >>> from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
        >>> model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=10, embed_dim=8, num_heads=2))
        >>> ids = torch.tensor([[1, 2, 3, 1, 2, 3]])
        >>> ex = ablation_explorer(model, ids, ids)
        >>> ex.set(layer1_head0=True)
        >>> ex.state["ablated"], ex.state["weights"].shape
        ([(1, 0)], torch.Size([2, 2, 6, 6]))
    """
    layers = attention_layers(model)
    check_tensor("input_ids", input_ids)
    sizes = check_shape("input_ids", input_ids, "B T")
    check_tensor("labels", labels)
    check_shape("labels", labels, "B T", **sizes)
    if isinstance(example, bool) or not isinstance(example, int) or not 0 <= example < sizes["B"]:
        raise ValueError(f"example: expected an int in 0 .. {sizes['B'] - 1}, got {example!r}")
    heads = {
        f"layer{layer}_head{head}": (layer, head)
        for layer, attn in enumerate(layers)
        for head in range(attn.num_heads)
    }
    controls = {
        name: widgets.Checkbox(value=False, description=f"ablate {layer}.{head}", indent=False)
        for name, (layer, head) in heads.items()
    }
    with torch.no_grad():
        full_loss = float(causal_lm_loss(model(input_ids), labels))  # the reference: every head on
    view = partial(_ablation_view, model, input_ids, labels, heads, example, full_loss)
    return Explorer(controls, view, title="Head ablation: tick a head to switch it off")
