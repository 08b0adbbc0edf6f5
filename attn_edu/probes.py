"""Linear probes on the residual stream, with Hewitt & Liang's control task (notebook 13).

A **probe** is a small classifier trained to read a property from a model's hidden states: if it succeeds
on held-out data, the property is *decodable* there. Hewitt & Liang (2019, *Designing and Interpreting
Probes with Control Tasks*) asked what that proves, since a probe can also learn: their **control task**
gives every token type a random label, so nothing but the probe's own capacity can solve it
(:func:`control_labels`). A probe that scores as well on the control as on the property says little about
the representation; the difference is their *selectivity*. And decodable is not used: only an intervention
on the model (ablation, patching) shows that the model relies on what the probe reads.

    streams  = residual_streams(model, ids)             # the input of each layer, then the final stream
    probe    = fit_probe(features, labels, classes)     # a linear map, trained with AdamW, full batch
    accuracy = probe_accuracy(probe, features, labels)
    error    = readout_error(features, target)          # a linear regression probe, least squares (nb 05)

Shapes:
    features ``(N, C)``, labels ``(N,)``; streams: ``L + 1`` tensors ``(B, T, C)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_shape
from attn_edu.interp import attention_layers


@torch.no_grad()
def residual_streams(model: nn.Module, input_ids: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream entering each attention layer, then the stream the unembedding reads.

    For a model whose attention layers read the residual stream directly, with no norm in between (the
    course's :class:`~attn_edu.models.attention_only.AttentionOnlyTransformer`): entry 0 is the embeddings
    (token + position), entry ``l`` the stream after ``l`` layers. Head ablations (``interp.head_ablation``)
    active around the call apply.

    Example:
        >>> from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
        >>> model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=10, embed_dim=8, num_heads=2, num_layers=2))
        >>> [tuple(s.shape) for s in residual_streams(model, torch.tensor([[1, 2, 3]]))]
        [(1, 3, 8), (1, 3, 8), (1, 3, 8)]
    """
    if not hasattr(model, "unembed"):
        raise ValueError(f"model: expected a model with an `unembed` layer, got {type(model).__name__}")
    seen: list[torch.Tensor] = []
    handles = [
        layer.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
        for layer in attention_layers(model)
    ]
    handles.append(model.unembed.register_forward_pre_hook(lambda m, args: seen.append(args[0])))
    try:
        model(input_ids)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def control_labels(token_ids: torch.Tensor, num_classes: int, *, seed: int = 0) -> torch.Tensor:
    """Hewitt & Liang's control task: each token type gets one random class, the same wherever it occurs.

    Shapes:
        token_ids any shape of ids ``0 .. max``; returns the same shape of classes ``0 .. num_classes - 1``.

    Example:
        >>> labels = control_labels(torch.tensor([[3, 1, 3, 2]]), 5)
        >>> bool(labels[0, 0] == labels[0, 2])        # the same type, the same label
        True
    """
    check_positive_int("num_classes", num_classes)
    if token_ids.dtype != torch.long or (token_ids.numel() and int(token_ids.min()) < 0):
        raise ValueError(f"token_ids: expected non-negative long ids, got {token_ids.dtype}")
    types = int(token_ids.max()) + 1 if token_ids.numel() else 0
    table = torch.randint(num_classes, (types,), generator=torch.Generator().manual_seed(seed))
    return table[token_ids]


def fit_probe(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    *,
    steps: int = 100,
    lr: float = 4e-2,
    weight_decay: float = 0.0,
    seed: int = 0,
) -> nn.Linear:
    """A linear probe ``features -> num_classes`` logits, trained on all rows at once (AdamW, cross-entropy)."""
    check_floating("features", features)
    sizes = check_shape("features", features, "N C")
    check_shape("labels", labels, "N", N=sizes["N"])
    check_positive_int("num_classes", num_classes)
    check_positive_int("steps", steps)
    if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < num_classes:
        raise ValueError(
            f"labels: expected classes 0 .. {num_classes - 1}, got {int(labels.min())} .. {int(labels.max())}"
        )
    torch.manual_seed(seed)
    probe = nn.Linear(sizes["C"], num_classes)
    optimizer = torch.optim.AdamW(probe.parameters(), lr=lr, weight_decay=weight_decay)
    features = features.detach()
    for _ in range(steps):
        loss = F.cross_entropy(probe(features), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return probe.eval()


@torch.no_grad()
def probe_accuracy(probe: nn.Module, features: torch.Tensor, labels: torch.Tensor) -> float:
    """Share of the rows whose most likely class is the label."""
    sizes = check_shape("features", features, "N C")
    check_shape("labels", labels, "N", N=sizes["N"])
    return (probe(features).argmax(dim=-1) == labels).float().mean().item()


@torch.no_grad()
def readout_error(features: torch.Tensor, target: torch.Tensor) -> float:
    """How much of ``target`` the best affine map of ``features`` leaves unexplained: 0 = all, 1 = nothing.

    The map is fitted by least squares (a linear regression probe, solved exactly rather than trained);
    the error is ``‖target − (features W + b)‖² / ‖target‖²``, summed over every position and channel.
    Leading dimensions are flattened into rows.

    Shapes:
        features ``(..., F)``, target ``(..., C)`` with the same leading dimensions; returns a float.

    Example:
        >>> x = torch.randn(100, 3)
        >>> readout_error(x, x @ torch.randn(3, 2) + 1.0) < 1e-6  # a linear function of x: fully recovered
        True
    """
    check_floating("features", features)
    check_floating("target", target)
    if features.shape[:-1] != target.shape[:-1]:
        raise ValueError(
            f"target: expected the leading dimensions of features {tuple(features.shape[:-1])}, "
            f"got {tuple(target.shape[:-1])}"
        )
    f = features.reshape(-1, features.shape[-1])  # (N, F)
    f = torch.cat([f, torch.ones(len(f), 1, dtype=f.dtype)], dim=1)  # (N, F + 1): a bias column
    y = target.reshape(-1, target.shape[-1]).to(f.dtype)  # (N, C)
    residual = y - f @ torch.linalg.lstsq(f, y).solution  # (N, C)
    return (residual.pow(2).sum() / y.pow(2).sum()).item()
