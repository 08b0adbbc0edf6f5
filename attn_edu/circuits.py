"""Circuits: read what heads compute from their weights, and find where a behaviour lives by patching.

    QK circuit of head h:  M_QK = W_Q,h W_K,hᵀ    (C, C)   score(dst, src) = x_dst M_QK x_srcᵀ (+ biases)
    OV circuit of head h:  M_OV = W_V,h W_O,h     (C, C)   what the head writes = Σ_src p · x_src M_OV

(Elhage et al., 2021, "A Mathematical Framework for Transformer Circuits", §"Attention Heads as
Information Movement"; written here for row vectors, ``x @ W``, as the course's layers compute.) A head of a
later layer can read what an earlier head wrote in three places, each measured by a **composition score**
``‖A B‖_F / (‖A‖_F ‖B‖_F)`` (same paper, "Composition Scores"):

- **K-composition**: the earlier head's output feeds the later head's *keys*: ``M_OV,1 M_QK,2ᵀ``. Induction
  heads find "the token after the previous occurrence" this way, keying on what a previous-token head wrote.
- **Q-composition**: it feeds the later head's *queries*: ``M_OV,1 M_QK,2``.
- **V-composition**: it feeds the later head's *values*: ``M_OV,1 M_OV,2``.

Biases are left out (they add constant terms that do not depend on the tokens). Multiplied out to the
vocabulary, ``W_E M_OV W_Uᵀ`` says which logits a head raises for each token it attends to; a head that
copies raises the token's own (:func:`copying_score`). Two random matrices of the
same shapes already score above 0, so every score is read against :func:`random_composition_baseline`.

**Activation patching** (Meng et al., 2022; Wang et al., 2023) runs the model on a *clean* input and on a
*corrupted* one that breaks the behaviour, then re-runs the corrupted input with one head's output taken from
the clean run (:func:`patch_head_outputs`). The share of the metric that comes back says how much of the
behaviour flows through that head.

Shapes:
    circuits ``(H, C, C)``; composition scores ``(H_first, H_second)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from attn_edu._validate import check_positive_int, check_shape
from attn_edu.interp import attention_layers
from attn_edu.multihead import MultiHeadAttention


def head_circuits(attn: MultiHeadAttention) -> tuple[torch.Tensor, torch.Tensor]:
    """Every head's QK circuit ``W_Q,h W_K,hᵀ`` and OV circuit ``W_V,h W_O,h``, each ``(C, C)``.

    ``W_Q,h`` is the ``(C, D)`` slice of ``q_proj`` that makes head ``h``'s queries (``q = x W_Q,h``);
    ``W_O,h`` the ``(D, C)`` slice of ``out_proj`` that carries head ``h``'s output back to the stream.

    Shapes:
        returns qk, ov ``(H, C, C)``.

    Example:
        >>> attn = MultiHeadAttention(8, 2)
        >>> qk, ov = head_circuits(attn)
        >>> qk.shape, torch.linalg.matrix_rank(ov[0]).item()     # (H, C, C); rank at most D = 4
        (torch.Size([2, 8, 8]), 4)
    """
    if not isinstance(attn, MultiHeadAttention):
        raise ValueError(f"attn: expected a MultiHeadAttention, got {type(attn).__name__}")
    if attn.num_kv_heads != attn.num_heads or attn.kdim != attn.embed_dim or attn.vdim != attn.embed_dim:
        raise ValueError("attn: circuits are read from self-attention with one key/value head per query head")
    H, D = attn.num_heads, attn.head_dim
    w_q = attn.q_proj.weight.T.reshape(attn.embed_dim, H, D).permute(1, 0, 2)  # (H, C, D)
    w_k = attn.k_proj.weight.T.reshape(attn.embed_dim, H, D).permute(1, 0, 2)  # (H, C, D)
    w_v = attn.v_proj.weight.T.reshape(attn.embed_dim, H, D).permute(1, 0, 2)  # (H, C, D)
    w_o = attn.out_proj.weight.T.reshape(H, D, attn.embed_dim)  # (H, D, C)
    return w_q @ w_k.transpose(-2, -1), w_v @ w_o  # (H, C, C) each


def composition_score(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``‖A B‖_F / (‖A‖_F ‖B‖_F)``: how much of what ``A`` writes ``B`` reads (1 at most, by Cauchy-Schwarz).

    Shapes:
        a ``(..., C, C)``, b ``(..., C, C)`` (broadcast); returns ``(...)``.

    Example:
        >>> e = torch.eye(3)
        >>> writes_x, reads_x, reads_y = torch.outer(e[0], e[0]), torch.outer(e[0], e[1]), torch.outer(e[1], e[1])
        >>> composition_score(writes_x, reads_x).item(), composition_score(writes_x, reads_y).item()
        (1.0, 0.0)
    """
    check_shape("a", a, "... C C")
    check_shape("b", b, "... C C")
    return torch.linalg.matrix_norm(a @ b) / (torch.linalg.matrix_norm(a) * torch.linalg.matrix_norm(b))


def composition_scores(first: MultiHeadAttention, second: MultiHeadAttention) -> dict[str, torch.Tensor]:
    """Q-, K- and V-composition of every head of ``first`` into every head of a later layer ``second``.

    Shapes:
        returns ``{"Q": ..., "K": ..., "V": ...}``, each ``(H_first, H_second)``: row = the earlier head.
    """
    qk_1, ov_1 = head_circuits(first)  # (H1, C, C)
    qk_2, ov_2 = head_circuits(second)  # (H2, C, C)
    writes = ov_1[:, None]  # (H1, 1, C, C): what each earlier head writes
    return {
        "Q": composition_score(writes, qk_2[None]),  # read by the later head's queries
        "K": composition_score(writes, qk_2.transpose(-2, -1)[None]),  # ... by its keys
        "V": composition_score(writes, ov_2[None]),  # ... by its values
    }


def random_composition_baseline(
    dim: int, rank: int, *, samples: int = 100, generator: torch.Generator | None = None
) -> float:
    """The mean composition score of two random Gaussian ``(dim, dim)`` matrices of rank ``rank``.

    A head's circuits have rank at most ``D``; two random matrices of that shape already compose to about
    0.13 (``dim`` 64, rank 16), not 0, so a measured score means something only well above this.

    Example:
        >>> round(random_composition_baseline(64, 16, generator=torch.Generator().manual_seed(0)), 2)
        0.13
    """
    check_positive_int("dim", dim)
    check_positive_int("rank", rank)
    check_positive_int("samples", samples)
    if rank > dim:
        raise ValueError(f"rank: expected at most dim={dim}, got {rank}")

    def low_rank() -> torch.Tensor:
        return torch.randn(samples, dim, rank, generator=generator) @ torch.randn(
            samples, rank, dim, generator=generator
        )

    return composition_score(low_rank(), low_rank()).mean().item()


def copying_score(full_ov: torch.Tensor) -> torch.Tensor:
    """``Σ λ / Σ |λ|`` over the eigenvalues of a head's full OV circuit: +1 for a pure copier, −1 for an anti-copier.

    The full OV circuit ``W_E M_OV W_Uᵀ`` ``(V, V)`` maps a token attended to onto the logits the head adds:
    a head that copies raises the logit of the very token it reads, which shows as eigenvalues with positive
    real parts (Elhage et al., 2021, "Detecting copying behavior"). The real part of the ratio is returned.

    Shapes:
        full_ov ``(..., V, V)``; returns ``(...)``.

    Example:
        >>> copying_score(torch.eye(4)).item(), copying_score(-torch.eye(4)).item()
        (1.0, -1.0)
    """
    check_shape("full_ov", full_ov, "... V V")
    eigenvalues = torch.linalg.eigvals(full_ov.double())  # (..., V) complex
    return (eigenvalues.sum(-1) / eigenvalues.abs().sum(-1)).real.to(full_ov.dtype)


@contextmanager
def _head_inputs(
    model: nn.Module,
    record: dict[int, torch.Tensor] | None,
    patch: tuple[int, int, dict[int, torch.Tensor]] | None,
) -> Iterator[None]:
    """Record every layer's per-head outputs (the input of ``out_proj``), or replace one head's by a recorded one."""
    layers = attention_layers(model)
    hooks = []
    for index, attn in enumerate(layers):
        D = attn.head_dim

        def hook(
            module: nn.Module, args: tuple[torch.Tensor, ...], index: int = index, D: int = D
        ) -> tuple[torch.Tensor, ...] | None:
            heads = args[0]  # (B, T, H·D): every head's output, side by side
            if record is not None:
                record[index] = heads.detach().clone()
            if patch is not None and patch[0] == index:
                head, source = patch[1], patch[2][index]
                heads = heads.clone()
                heads[..., head * D : (head + 1) * D] = source[..., head * D : (head + 1) * D]
                return (heads,)
            return None

        hooks.append(attn.out_proj.register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for handle in hooks:
            handle.remove()


@torch.no_grad()
def patch_head_outputs(
    model: nn.Module,
    clean: torch.Tensor,
    corrupted: torch.Tensor,
    metric: Callable[[torch.Tensor], float],
    heads: Sequence[tuple[int, int]] | None = None,
) -> dict[str, torch.Tensor | float]:
    """Patch each head's output from the clean run into the corrupted run; how much of the metric returns.

    ``metric(logits)`` scores a run (higher = more of the behaviour). For each head ``(layer, h)`` the
    corrupted input is run again with that head's output, at every position, replaced by its output on the
    clean input; ``recovered[layer, h] = (patched − corrupted) / (clean − corrupted)``: 0 when the head
    carries none of the difference, 1 when it carries all of it. ``heads`` limits the list (default: all).

    Shapes:
        clean, corrupted ``(B, T)`` token ids; returns ``{"clean", "corrupted"}`` floats and
        ``"recovered"`` ``(L, H)`` (NaN for heads not patched).
    """
    layers = attention_layers(model)
    L, H = len(layers), layers[0].num_heads
    if clean.shape != corrupted.shape:
        raise ValueError(
            f"corrupted: expected the clean input's shape {tuple(clean.shape)}, got {tuple(corrupted.shape)}"
        )
    clean_outputs: dict[int, torch.Tensor] = {}
    with _head_inputs(model, clean_outputs, None):
        clean_score = metric(model(clean))
    corrupted_score = metric(model(corrupted))
    if clean_score == corrupted_score:
        raise ValueError("corrupted: the metric is the same on both inputs, so there is nothing to recover")
    recovered = torch.full((L, H), float("nan"))
    for layer, head in heads if heads is not None else [(i, h) for i in range(L) for h in range(H)]:
        with _head_inputs(model, None, (layer, head, clean_outputs)):
            patched = metric(model(corrupted))
        recovered[layer, head] = (patched - corrupted_score) / (clean_score - corrupted_score)
    return {"clean": clean_score, "corrupted": corrupted_score, "recovered": recovered}
