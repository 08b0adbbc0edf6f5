"""A quantised KV cache (KIVI: Liu et al., ICML 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV
Cache"): keys quantised per channel, values per token, in groups, the newest tokens kept in float.

Why the two directions differ. A few key *channels* carry large values for every token (outlier channels), so
one scale per channel, over a group of tokens, fits keys; values have no such channels, and each token's output
mixes values along the token axis, so one scale per token (over a group of channels) fits them. Quantising is
asymmetric min-max: ``code = round((x - min) / scale)``, ``scale = (max - min) / (2^bits - 1)``, and every value
comes back within ``scale / 2`` of itself. Keys are quantised a whole group of ``group_size`` tokens at a time, so
the newest ``< group_size`` tokens wait in float (KIVI's residual); 4-bit codes are packed two to a byte.

:class:`QuantizedKVCache` keeps :class:`attn_edu.kv_cache.KVCache`'s interface (``layers``, ``seq_len``,
``nbytes()``, ``update(k, v)`` returning every key and value so far), so every model here decodes through it
unchanged; it hands attention dequantised float tensors (KIVI fuses that step into its kernel).

Shapes: ``update``: k, v ``(B, H_kv, T, D)``; returns ``(B, H_kv, S, D)``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from attn_edu._validate import check_positive_int, check_shape
from attn_edu.kv_cache import KVCache

BITS = (8, 4)


def quantize(x: torch.Tensor, bits: int, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric min-max quantisation with one (scale, minimum) pair per slice along ``dim``.

    Returns ``(codes, scale, minimum)``: codes ``uint8`` in ``0 .. 2^bits - 1`` (4-bit codes packed two to a byte
    along the last dim), scale and minimum in float16 with ``dim`` kept as size 1.

    Example:
        >>> x = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
        >>> codes, scale, low = quantize(x, 8, dim=-1)
        >>> dequantize(codes, scale, low, 8, x.shape[-1])
        tensor([[0., 1., 2., 3.]])
    """
    if bits not in BITS:
        raise ValueError(f"bits: expected one of {BITS}, got {bits!r}")
    levels = 2**bits - 1
    low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    scale = ((high - low) / levels).clamp_min(1e-8)  # a constant slice gets code 0 and comes back exactly
    codes = ((x - low) / scale).round().clamp(0, levels).to(torch.uint8)
    if bits == 4:
        if codes.shape[-1] % 2:
            raise ValueError(
                f"x: 4-bit codes pack two to a byte along the last dim, which must be even; got {x.shape[-1]}"
            )
        codes = codes[..., 0::2] | (codes[..., 1::2] << 4)  # (..., D / 2)
    return codes, scale.half(), low.half()


def dequantize(
    codes: torch.Tensor, scale: torch.Tensor, low: torch.Tensor, bits: int, width: int
) -> torch.Tensor:
    """The float32 values back from :func:`quantize` (``width``: the last dim before packing)."""
    if bits == 4:
        unpacked = torch.empty(*codes.shape[:-1], width, dtype=torch.uint8, device=codes.device)
        unpacked[..., 0::2], unpacked[..., 1::2] = codes & 15, codes >> 4
        codes = unpacked
    return codes.float() * scale.float() + low.float()


def _bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class QuantizedKVCacheLayer:
    """One layer's cache, quantised: full groups of ``group_size`` tokens as codes, the rest in float.

    Keys: one scale per (channel, group of tokens). Values: one scale per (token, group of ``group_size``
    channels, or all of them when the head is narrower).

    Example:
        >>> layer = QuantizedKVCacheLayer(bits=8, group_size=4)
        >>> k = torch.randn(1, 2, 6, 8)
        >>> k_all, v_all = layer.update(k, k)
        >>> layer.seq_len, round((k_all - k).abs().max().item(), 2) <= 0.05
        (6, True)
    """

    def __init__(self, bits: int = 8, group_size: int = 32) -> None:
        if bits not in BITS:
            raise ValueError(f"bits: expected one of {BITS}, got {bits!r}")
        self.bits, self.group_size = bits, check_positive_int("group_size", group_size)
        self.groups: list[tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = []  # quantised K, V
        self.k_float: torch.Tensor | None = None  # (B, H_kv, R, D), R < group_size: the newest tokens
        self.v_float: torch.Tensor | None = None
        self.k_done: torch.Tensor | None = (
            None  # the dequantised groups, kept so each step adds only new ones
        )
        self.v_done: torch.Tensor | None = None
        self._seq_len = 0

    @property
    def seq_len(self) -> int:
        """Tokens stored so far (the position of the next token)."""
        return self._seq_len

    def _quantize_group(self, k: torch.Tensor, v: torch.Tensor) -> None:
        Dv = v.shape[-1]
        width = min(self.group_size, Dv) if Dv % min(self.group_size, Dv) == 0 else Dv
        key = quantize(k.transpose(-1, -2), self.bits, dim=-1)  # per channel: over the group's tokens
        value = quantize(
            v.reshape(*v.shape[:-1], Dv // width, width), self.bits, dim=-1
        )  # per token, per channels
        self.groups.append((key, value))
        k_back = dequantize(*key, self.bits, k.shape[-2]).transpose(-1, -2)  # (B, H_kv, G, D)
        v_back = dequantize(*value, self.bits, width).reshape(v.shape)  # (B, H_kv, G, Dv)
        self.k_done = k_back if self.k_done is None else torch.cat([self.k_done, k_back], dim=2)
        self.v_done = v_back if self.v_done is None else torch.cat([self.v_done, v_back], dim=2)

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k, v``; quantise every group that is now full; return every key and value, dequantised."""
        if k.dim() != 4 or v.shape[:-1] != k.shape[:-1]:
            raise ValueError(
                f"k, v: expected (B, H_kv, T, D) with matching (B, H_kv, T); got {tuple(k.shape)}, {tuple(v.shape)}"
            )
        self.k_float = k if self.k_float is None else torch.cat([self.k_float, k], dim=2)
        self.v_float = v if self.v_float is None else torch.cat([self.v_float, v], dim=2)
        while self.k_float.shape[2] >= self.group_size:
            g = self.group_size
            self._quantize_group(self.k_float[:, :, :g].float(), self.v_float[:, :, :g].float())
            self.k_float, self.v_float = self.k_float[:, :, g:], self.v_float[:, :, g:]
        self._seq_len += k.shape[2]
        if self.k_done is None:
            return self.k_float, self.v_float
        k_all = torch.cat([self.k_done.to(k.dtype), self.k_float], dim=2)  # (B, H_kv, S, D)
        v_all = torch.cat([self.v_done.to(v.dtype), self.v_float], dim=2)
        return k_all, v_all

    def nbytes(self) -> int:
        """Bytes of what the cache stores: codes, scales and minima, and the float residual (not the dequantised
        copy kept for speed, which a fused kernel would not need)."""
        stored = [t for key, value in self.groups for t in (*key, *value)]
        residual = [t for t in (self.k_float, self.v_float) if t is not None]
        return _bytes(*stored, *residual)

    def reset(self) -> None:
        """Forget every stored token."""
        self.__init__(self.bits, self.group_size)  # type: ignore[misc]


class QuantizedKVCache(KVCache):
    """A :class:`attn_edu.kv_cache.KVCache` whose layers are :class:`QuantizedKVCacheLayer`.

    Example:
        >>> from attn_edu.models import GPT, GPTConfig
        >>> model = GPT(GPTConfig(vocab_size=10, embed_dim=16, num_layers=2, num_heads=2)).eval()
        >>> cache = QuantizedKVCache(2, bits=8, group_size=4)
        >>> logits = model(torch.randint(10, (1, 9)), kv_cache=cache)
        >>> cache.seq_len, len(cache.layers[0].groups)
        (9, 2)
    """

    def __init__(self, num_layers: int, *, bits: int = 8, group_size: int = 32) -> None:
        super().__init__(num_layers)
        self.layers = [QuantizedKVCacheLayer(bits, group_size) for _ in range(num_layers)]  # type: ignore[misc]

    def crop(self, length: int) -> None:
        raise ValueError(
            "crop: a quantised cache has merged its tokens into groups; crop a full KVCache instead"
        )


@torch.no_grad()
def decode_loss(model: Any, ids: torch.Tensor, cache: Any) -> float:
    """Mean next-token loss (nats per token) of ``model`` reading ``ids`` one token at a time through ``cache``:
    what the cache's approximation costs the predictions, measured where decoding meets it. With a float
    :class:`attn_edu.kv_cache.KVCache` it equals the loss of one full forward pass.

    Shapes:
        ids ``(B, T)``.
    """
    check_shape("ids", ids, "B T")
    logits = torch.cat([model(ids[:, t : t + 1], kv_cache=cache) for t in range(ids.shape[1] - 1)], dim=1)
    return F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten()).item()  # (B·(T-1), V) scored


__all__ = ["BITS", "QuantizedKVCache", "QuantizedKVCacheLayer", "decode_loss", "dequantize", "quantize"]
