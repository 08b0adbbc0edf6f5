"""The key/value cache: remember past keys and values so each new token costs one row, not a rerun.

A causal decoder's keys and values for token ``s`` depend only on tokens ``0 .. s``, so they never
change once computed. Generating token ``t + 1`` therefore needs only the *new* token's query, key and
value; the older keys and values are read from the cache (Pope et al., 2022, "Efficiently Scaling
Transformer Inference", section 2). Each step then costs ``O(S·C)`` attention work instead of
re-running the whole prefix.

The price is memory, which grows linearly with the context:

    bytes = layers × H_kv × S × D × 2 (K and V) × bytes per number × B

That is why grouped-query (``H_kv < H``, Ainslie et al., 2023) and multi-query attention (``H_kv = 1``,
Shazeer, 2019) exist: they shrink ``H_kv``, and with it the cache, by ``H / H_kv``.

Shapes:
    each layer stores k and v ``(B, H_kv, S, D)``.
"""

from __future__ import annotations

import torch

from attn_edu._validate import check_positive_int, check_same_dtype, check_shape
from attn_edu.hardware import GPUS


def _nbytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _new_kv_sizes(
    k: torch.Tensor, v: torch.Tensor, stored_k: torch.Tensor | None, stored_v: torch.Tensor | None
) -> dict[str, int]:
    """``{B, H_kv, T, D}`` of the new keys and values, checked against each other and what is stored.

    The values may be narrower or wider than the keys (``Dv``, as attention allows; multi-head latent
    attention stores its latent as keys and its shared rotary key as values), but not change width.
    """
    sizes = check_shape("k", k, "B H_kv T D")
    if stored_k is not None:
        held = check_shape("cache", stored_k, "B H_kv S D")
        sizes = check_shape("k", k, "B H_kv T D", B=held["B"], H_kv=held["H_kv"], D=held["D"])
    value_width = {} if stored_v is None else {"Dv": stored_v.shape[-1]}
    check_shape("v", v, "B H_kv T Dv", B=sizes["B"], H_kv=sizes["H_kv"], T=sizes["T"], **value_width)
    check_same_dtype(k=k, v=v)
    return sizes


class KVCacheLayer:
    """One attention layer's cache: appends new keys/values, returns everything stored so far.

    Two storage strategies, chosen by ``max_len``:

    - ``max_len=None`` (default): ``torch.cat`` the new rows onto the old tensors. It uses exactly the
      memory of the tokens stored and needs no size up front, but every step copies the whole cache
      (``O(S)`` per step, ``O(S²)`` over a generation).
    - ``max_len=N``: allocate ``(B, H_kv, N, D)`` buffers at the first update and write new rows in
      place, returning views of the filled part. Each step copies only the new rows, but the full
      ``N`` tokens of memory are reserved from the start (what serving systems do, and why paged
      caches (Kwon et al., 2023, vLLM) were invented to avoid reserving for the worst case).

    ``seq_len`` counts the tokens stored; :class:`attn_edu.multihead.MultiHeadAttention` reads it
    *before* ``update`` as the position of the first new token.

    Shapes:
        ``update``: k, v ``(B, H_kv, T, D)``; returns k_all, v_all ``(B, H_kv, S, D)``, ``S = seq_len``.

    Example:
        >>> layer = KVCacheLayer()
        >>> k_all, v_all = layer.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
        >>> k_all, v_all = layer.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
        >>> layer.seq_len, tuple(k_all.shape)          # (B, H_kv, S, D)
        (4, (1, 2, 4, 4))
    """

    def __init__(self, max_len: int | None = None) -> None:
        self.max_len = None if max_len is None else check_positive_int("max_len", max_len)
        self.k: torch.Tensor | None = None  # (B, H_kv, S or max_len, D)
        self.v: torch.Tensor | None = None  # (B, H_kv, S or max_len, D)
        self._seq_len = 0

    @property
    def seq_len(self) -> int:
        """Tokens stored so far (the position of the next token)."""
        return self._seq_len

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k, v`` (the new tokens) and return all keys and values stored so far."""
        B, H_kv, T, D = _new_kv_sizes(k, v, self.k, self.v).values()
        new_len = self._seq_len + T

        if self.max_len is None:
            # Concatenate: exact memory, but a full copy of the cache at every step.
            self.k = k if self.k is None else torch.cat([self.k, k], dim=2)  # (B, H_kv, S, D)
            self.v = v if self.v is None else torch.cat([self.v, v], dim=2)  # (B, H_kv, S, D)
            self._seq_len = new_len
            return self.k, self.v

        if new_len > self.max_len:
            raise ValueError(
                f"k: {T} new tokens after {self._seq_len} cached exceed the cache's max_len={self.max_len}"
            )
        if self.k is None:
            # Reserve the whole buffer once; later steps only write their new rows.
            self.k = k.new_zeros(B, H_kv, self.max_len, D)  # (B, H_kv, max_len, D)
            self.v = v.new_zeros(B, H_kv, self.max_len, v.shape[-1])  # (B, H_kv, max_len, Dv)
        self.k[:, :, self._seq_len : new_len] = k
        self.v[:, :, self._seq_len : new_len] = v
        self._seq_len = new_len
        return self.k[:, :, :new_len], self.v[:, :, :new_len]  # (B, H_kv, S, D) views

    def nbytes(self) -> int:
        """Bytes held by the stored tensors (the whole buffer when ``max_len`` is set)."""
        return _nbytes(self.k, self.v)

    def crop(self, length: int) -> None:
        """Keep the first ``length`` tokens and forget the rest (the rejected guesses of speculative decoding)."""
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self._seq_len:
            raise ValueError(f"length: expected an int from 0 to seq_len = {self._seq_len}, got {length!r}")
        if self.max_len is None and self.k is not None and self.v is not None:
            self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]  # (B, H_kv, length, D)
        self._seq_len = length  # a reserved buffer keeps its rows; the next update overwrites them

    def reset(self) -> None:
        """Forget every stored token."""
        self.k = self.v = None
        self._seq_len = 0


class RollingKVCacheLayer:
    """A sliding-window layer's cache: a ring buffer of ``window`` slots that never grows.

    With a causal sliding window of ``W`` keys (:class:`attn_edu.multihead.MultiHeadAttention`'s
    ``window=W``), no query ever looks further back than ``W - 1`` tokens, so older keys and values
    can be thrown away: token ``p`` is written to slot ``p mod W``, over the token ``p - W`` that has
    just left every window. This is Mistral 7B's *rolling buffer cache* (Jiang et al., 2023, section
    2): the memory of ``W`` tokens, whatever the length of the generation (Mistral: ``W = 4096``).

    Decoding one token at a time, ``update`` returns the buffer as it lies, *out of order* once it
    has wrapped round. Attention does not mind: the softmax sums over keys in any order, and each
    key already carries its position (rotary embeddings rotate keys before they are cached; the
    window's mask, all ``True`` for one query over at most ``W`` keys, needs no order either). For
    several new tokens at once (a prompt) it returns the stored tokens in time order followed by the
    new ones, so that the model's sliding-window mask lines up with them.

    ``seq_len`` counts every token seen (the position of the next one), not the slots in use.

    Shapes:
        ``update``: k, v ``(B, H_kv, T, D)``; returns ``(B, H_kv, S, D)`` with ``S = min(seq_len, W)``
        for one new token, ``S = min(previous seq_len, W) + T`` for several.

    Example:
        >>> layer = RollingKVCacheLayer(window=3)
        >>> for p in range(5):                       # key p holds the number p
        ...     k_all, _ = layer.update(torch.full((1, 1, 1, 1), float(p)), torch.zeros(1, 1, 1, 1))
        >>> layer.seq_len, k_all.flatten().tolist()  # slots 0, 1, 2 hold tokens 3, 4, 2
        (5, [3.0, 4.0, 2.0])
        >>> layer.nbytes()                           # 3 slots of K and V, 4 bytes each
        24
    """

    def __init__(self, window: int) -> None:
        self.window = check_positive_int("window", window)
        self.k: torch.Tensor | None = None  # (B, H_kv, window, D), slot p mod window holds token p
        self.v: torch.Tensor | None = None  # (B, H_kv, window, D)
        self._seq_len = 0

    @property
    def seq_len(self) -> int:
        """Tokens seen so far (the position of the next token), however many slots hold them."""
        return self._seq_len

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k, v`` into their slots; return the keys and values the new queries may need."""
        B, H_kv, T, D = _new_kv_sizes(k, v, self.k, self.v).values()
        W, start = self.window, self._seq_len
        if self.k is None:
            self.k = k.new_zeros(B, H_kv, W, D)  # (B, H_kv, W, D): all the memory it will ever use
            self.v = v.new_zeros(B, H_kv, W, v.shape[-1])
        assert self.v is not None

        if T == 1:  # one decoding step: overwrite the oldest slot, return the buffer unsorted
            slot = start % W
            self.k[:, :, slot] = k[:, :, 0]
            self.v[:, :, slot] = v[:, :, 0]
            self._seq_len = start + 1
            filled = min(self._seq_len, W)
            return self.k[:, :, :filled], self.v[:, :, :filled]  # (B, H_kv, S, D) views

        # Several tokens: the stored ones in time order, then the new ones.
        k_all = torch.cat([self._in_time_order(self.k), k], dim=2)  # (B, H_kv, S, D)
        v_all = torch.cat([self._in_time_order(self.v), v], dim=2)  # (B, H_kv, S, D)
        keep = min(W, k_all.shape[2])  # the last W tokens stay, each in its slot
        slots = torch.arange(start + T - keep, start + T, device=k.device) % W  # (keep,)
        self.k[:, :, slots] = k_all[:, :, -keep:]
        self.v[:, :, slots] = v_all[:, :, -keep:]
        self._seq_len = start + T
        return k_all, v_all

    def _in_time_order(self, buffer: torch.Tensor) -> torch.Tensor:
        """The filled slots from the oldest token to the newest: ``(B, H_kv, min(seq_len, W), D)``."""
        if self._seq_len <= self.window:
            return buffer[:, :, : self._seq_len]  # not wrapped yet: slot i holds token i
        oldest = self._seq_len % self.window  # the slot the next token would overwrite
        return torch.cat([buffer[:, :, oldest:], buffer[:, :, :oldest]], dim=2)

    def nbytes(self) -> int:
        """Bytes held by the two buffers: ``window`` tokens' worth once the first token arrives."""
        return _nbytes(self.k, self.v)

    def reset(self) -> None:
        """Forget every stored token."""
        self.k = self.v = None
        self._seq_len = 0


class StreamingKVCacheLayer:
    """StreamingLLM's cache: the first ``n_sink`` tokens kept for good, and the latest ``window`` (Xiao et al.,
    2024, "Efficient Streaming Language Models with Attention Sinks", section 3.2).

    A model trained with full attention parks weight on its first tokens, whatever they say (the attention
    sink, notebook 13). A window-only cache throws those tokens away as soon as the text outgrows it, and the
    loss jumps; keeping a few of them (four in the paper) is enough to keep it level, with memory fixed at
    ``n_sink + window`` tokens however long the stream runs.

    Positions are *places in the cache*, not in the text: the keys are stored unrotated and turned to
    positions ``0 .. S − 1`` each time they are read, and the new queries to the last ``T`` of them
    (``positions_in_cache = True`` tells :class:`attn_edu.multihead.MultiHeadAttention` so). A model then
    never meets a distance longer than the cache, however far the stream has run. Until the first token is
    evicted the cache holds every token at its own position, and the outputs equal full attention's.

    ``update`` first evicts the oldest tokens after the sinks to make room (the ``T`` new ones included, at most
    ``n_sink + window`` are read), then appends. A prompt longer than the window is read whole, as the
    reference implementation's prefill does, and trimmed at the next step. ``n_sink = 0`` is the window-only
    cache.

    Shapes:
        ``update``: k (unrotated), v ``(B, H_kv, T, D)``; returns ``(B, H_kv, S, D)``, ``S <= n_sink + window``
        for one new token.

    Example:
        >>> layer = StreamingKVCacheLayer(n_sink=2, window=3)
        >>> for p in range(8):                       # key p holds the number p
        ...     k_all, _ = layer.update(torch.full((1, 1, 1, 1), float(p)), torch.zeros(1, 1, 1, 1))
        >>> layer.seq_len, k_all.flatten().tolist()  # the two sinks, then the latest three, in order
        (8, [0.0, 1.0, 5.0, 6.0, 7.0])
    """

    positions_in_cache = True  # MultiHeadAttention rotates the keys when they are read, not when stored

    def __init__(self, n_sink: int, window: int) -> None:
        if isinstance(n_sink, bool) or not isinstance(n_sink, int) or n_sink < 0:
            raise ValueError(
                f"n_sink: expected an int >= 0 (first tokens kept; 4 in StreamingLLM), got {n_sink!r}"
            )
        self.n_sink = n_sink
        self.window = check_positive_int("window", window)
        self.k: torch.Tensor | None = None  # (B, H_kv, S, D) unrotated: the sinks, then the latest, in order
        self.v: torch.Tensor | None = None  # (B, H_kv, S, Dv)
        self._seq_len = 0

    @property
    def seq_len(self) -> int:
        """Tokens seen so far, however many the cache still holds."""
        return self._seq_len

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Evict to make room for ``k, v``, append them, and return what the new queries read."""
        T = _new_kv_sizes(k, v, self.k, self.v)["T"]
        if self.k is not None and self.v is not None:
            keep = max(self.n_sink + self.window - T, self.n_sink)  # stored tokens that stay
            if self.k.shape[2] > keep:  # evict the oldest after the sinks
                recent = keep - self.n_sink
                self.k, self.v = (
                    torch.cat([x[:, :, : self.n_sink], x[:, :, x.shape[2] - recent :]], dim=2)
                    for x in (self.k, self.v)
                )  # (B, H_kv, keep, D)
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)  # (B, H_kv, S, D)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)  # (B, H_kv, S, Dv)
        self._seq_len += T
        return self.k, self.v

    def nbytes(self) -> int:
        """Bytes held by the stored keys and values: at most ``n_sink + window`` tokens after a decoding step."""
        return _nbytes(self.k, self.v)

    def reset(self) -> None:
        """Forget every stored token."""
        self.k = self.v = None
        self._seq_len = 0


class CrossKVCacheLayer:
    """One cross-attention layer's keys and values: projected from the encoder output once, then reused.

    In an encoder-decoder the cross-attention's keys and values come from the encoder's output, which
    stays the same while the decoder writes; only the queries change from step to step. So
    :meth:`attn_edu.models.T5.decode` projects them at the first step
    (:meth:`attn_edu.multihead.MultiHeadAttention.project_kv`), stores them here, and reads them back
    afterwards (Hugging Face keeps them in the cross-attention half of its ``EncoderDecoderCache`` for
    the same reason). A cache belongs to one encoder output: for another input, start a new
    :class:`KVCache` (or :meth:`KVCache.reset` it).

    Shapes:
        ``store``: k, v ``(B, H_kv, S, D)``.

    Example:
        >>> layer = CrossKVCacheLayer()
        >>> layer.k is None
        True
        >>> layer.store(torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 5, 4))
        >>> layer.k.shape
        torch.Size([1, 2, 5, 4])
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None  # (B, H_kv, S, D)
        self.v: torch.Tensor | None = None  # (B, H_kv, S, D)

    def store(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Keep the projected ``k, v``."""
        sizes = check_shape("k", k, "B H_kv S D")
        check_shape("v", v, "B H_kv S D", **sizes)
        self.k, self.v = k, v

    def nbytes(self) -> int:
        """Bytes held by the stored key and value tensors."""
        return _nbytes(self.k, self.v)

    def reset(self) -> None:
        """Forget the stored keys and values."""
        self.k = self.v = None


class KVCache:
    """A cache for a whole decoder: one :class:`KVCacheLayer` per layer, in ``.layers``.

    With ``window=W`` (for a model with a sliding window of ``W``, e.g. ``LlamaConfig(sliding_window=W)``)
    each layer is a :class:`RollingKVCacheLayer` of ``W`` slots instead.
    With ``window=W`` and ``n_sink=N`` each layer is a :class:`StreamingKVCacheLayer` (StreamingLLM: the
    first ``N`` tokens and the latest ``W``, positions counted in the cache), for a model trained with full
    attention and RoPE.

    Pass it as ``model(input_ids, kv_cache=cache)``; layer ``i`` of the model uses ``cache.layers[i]``,
    and the model reads ``cache.seq_len`` as the position of the first new token. An encoder-decoder
    (:class:`attn_edu.models.T5`) also keeps each decoder layer's cross-attention keys and values in
    ``cache.cross_layers[i]`` (:class:`CrossKVCacheLayer`); decoder-only models leave those empty.

    Example:
        >>> cache = KVCache(num_layers=2)
        >>> for layer in cache.layers:
        ...     _ = layer.update(torch.zeros(1, 4, 5, 8), torch.zeros(1, 4, 5, 8))
        >>> cache.seq_len, cache.nbytes()              # 2 layers × 4 heads × 5 tokens × 8 × (K, V) × 4 bytes
        (5, 2560)
    """

    def __init__(
        self,
        num_layers: int,
        *,
        max_len: int | None = None,
        window: int | None = None,
        n_sink: int | None = None,
    ) -> None:
        check_positive_int("num_layers", num_layers)
        if window is not None and max_len is not None:
            raise ValueError(
                f"window: a rolling cache holds exactly window={window} tokens; give max_len "
                f"(got {max_len}) or window, not both"
            )
        if n_sink is not None and window is None:
            raise ValueError(
                f"window: a streaming cache (n_sink={n_sink}) needs the window of latest tokens it keeps"
            )
        self.layers: list[KVCacheLayer | RollingKVCacheLayer | StreamingKVCacheLayer]
        if n_sink is not None and window is not None:
            self.layers = [StreamingKVCacheLayer(n_sink, window) for _ in range(num_layers)]
        elif window is not None:
            self.layers = [RollingKVCacheLayer(window) for _ in range(num_layers)]
        else:
            self.layers = [KVCacheLayer(max_len) for _ in range(num_layers)]
        self.cross_layers = [CrossKVCacheLayer() for _ in range(num_layers)]

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def seq_len(self) -> int:
        """Tokens seen (every layer has seen the same number once a forward pass has finished)."""
        return self.layers[0].seq_len

    def nbytes(self) -> int:
        """Bytes held by all layers' key and value tensors (cross-attention ones included)."""
        return sum(layer.nbytes() for layer in [*self.layers, *self.cross_layers])

    def crop(self, length: int) -> None:
        """Keep the first ``length`` tokens of every layer (:meth:`KVCacheLayer.crop`). A rolling, streaming or
        recurrent layer has already forgotten or merged what came before, so it cannot be cropped."""
        for i, layer in enumerate(self.layers):
            if not isinstance(layer, KVCacheLayer):
                raise ValueError(
                    f"crop: layer {i} is a {type(layer).__name__}, which keeps no per-token history to cut back; "
                    "only a full cache (KVCacheLayer) can be cropped"
                )
        for layer in self.layers:
            layer.crop(length)

    def reset(self) -> None:
        """Forget every stored token in every layer."""
        for layer in [*self.layers, *self.cross_layers]:
            layer.reset()


def kv_cache_bytes(
    *,
    num_layers: int,
    num_kv_heads: int,
    seq_len: int,
    head_dim: int,
    batch_size: int = 1,
    dtype_bytes: int = 2,
) -> int:
    """Memory a KV cache needs: ``layers × H_kv × S × D × 2 (K and V) × bytes × B``.

    ``dtype_bytes`` is 2 for fp16/bf16 (the usual serving precision), 4 for fp32, 1 for an 8-bit cache.

    Example:
        >>> kv_cache_bytes(num_layers=32, num_kv_heads=32, seq_len=4096, head_dim=128) / 2**30   # Llama-2-7B
        2.0
    """
    for name, value in [
        ("num_layers", num_layers),
        ("num_kv_heads", num_kv_heads),
        ("seq_len", seq_len),
        ("head_dim", head_dim),
        ("batch_size", batch_size),
        ("dtype_bytes", dtype_bytes),
    ]:
        check_positive_int(name, value)
    return num_layers * num_kv_heads * seq_len * head_dim * 2 * dtype_bytes * batch_size


# Attention shapes of public models, read from each model's config.json on the Hugging Face Hub
# (num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size / num_attention_heads):
# meta-llama/Llama-2-7b-hf, meta-llama/Llama-2-70b-hf, meta-llama/Meta-Llama-3-8B,
# mistralai/Mistral-7B-v0.1, tiiuae/falcon-7b (n_layer 32, n_head 71, hidden 4544, multi_query: true),
# openai-community/gpt2. GQA in Llama 2 70B: Touvron et al., 2023, section 2.2; Mistral: Jiang et al., 2023.
MODEL_SHAPES: dict[str, dict[str, int | str]] = {
    "GPT-2 small": dict(num_layers=12, num_heads=12, num_kv_heads=12, head_dim=64, kind="MHA"),
    "Llama-2-7B": dict(num_layers=32, num_heads=32, num_kv_heads=32, head_dim=128, kind="MHA"),
    "Llama-3-8B": dict(num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, kind="GQA"),
    "Mistral-7B": dict(num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, kind="GQA"),
    "Llama-2-70B": dict(num_layers=80, num_heads=64, num_kv_heads=8, head_dim=128, kind="GQA"),
    "Falcon-7B": dict(num_layers=32, num_heads=71, num_kv_heads=1, head_dim=64, kind="MQA"),
}


def kv_cache_table(
    seq_len: int = 4096, *, batch_size: int = 1, dtype_bytes: int = 2
) -> list[dict[str, float | int | str]]:
    """The KV-cache size of real models at one context length, one row per model in ``MODEL_SHAPES``.

    Each row gives the shape, the bytes per token, the total in GiB, and the saving against an MHA
    cache of the same model (``H / H_kv``).

    Example:
        >>> rows = {row["model"]: row for row in kv_cache_table(4096)}
        >>> rows["Llama-2-7B"]["GiB"], rows["Llama-3-8B"]["GiB"], rows["Llama-3-8B"]["saving"]
        (2.0, 0.5, 4.0)
    """
    rows: list[dict[str, float | int | str]] = []
    for name, shape in MODEL_SHAPES.items():
        layers, heads, kv_heads, head_dim = (
            int(shape[k]) for k in ("num_layers", "num_heads", "num_kv_heads", "head_dim")
        )
        total = kv_cache_bytes(
            num_layers=layers,
            num_kv_heads=kv_heads,
            seq_len=seq_len,
            head_dim=head_dim,
            batch_size=batch_size,
            dtype_bytes=dtype_bytes,
        )
        rows.append(
            {
                "model": name,
                "kind": str(shape["kind"]),
                "layers": layers,
                "heads": heads,
                "kv_heads": kv_heads,
                "head_dim": head_dim,
                "KiB_per_token": total / (seq_len * batch_size) / 2**10,
                "GiB": round(total / 2**30, 4),
                "saving": heads / kv_heads,
            }
        )
    return rows


def format_kv_cache_table(contexts: dict[str, int], *, dtype_bytes: int = 2) -> str:
    """:func:`kv_cache_table` at several context lengths, as an aligned text table: one row per model, its
    shape (``L`` layers, ``H`` query heads, ``H_kv`` kv heads, head dim ``D``), KiB per token, GiB for one
    sequence at each context, and the saving ``H / H_kv`` against multi-head attention.

    Example:
        >>> print(format_kv_cache_table({"4k": 4096}).splitlines()[2])
        Llama-2-7B   MHA   32  32   32  128     512.0       2.000      1x
    """
    if not isinstance(contexts, dict) or not contexts:
        raise ValueError(f"contexts: expected a dict {{name: tokens}}, got {contexts!r}")
    tables = {name: kv_cache_table(seq_len, dtype_bytes=dtype_bytes) for name, seq_len in contexts.items()}
    header = f"{'model':12} {'kind':4} {'L':>3} {'H':>3} {'H_kv':>4} {'D':>4} {'KiB/token':>9}"
    header += "".join(f"{'GiB @ ' + name:>12}" for name in contexts) + f"{'saving':>8}"
    lines = [header]
    first = next(iter(tables.values()))
    for i, row in enumerate(first):
        sizes = "".join(f"{table[i]['GiB']:>12.3f}" for table in tables.values())
        lines.append(
            f"{row['model']:12} {row['kind']:4} {row['layers']:>3} {row['heads']:>3} {row['kv_heads']:>4} "
            f"{row['head_dim']:>4} {row['KiB_per_token']:>9.1f}{sizes}{row['saving']:>7.0f}x"
        )
    return "\n".join(lines)


def decode_roofline(
    *,
    weight_bytes: int,
    cache_bytes_per_token: int,
    context: int,
    batch_size: int = 1,
    gpu: str = "H100",
) -> dict[str, float | bool]:
    """The fastest a decoder can generate on ``gpu`` if every step is limited by memory bandwidth.

    Each decoding step reads every weight once (shared by the batch) and every cached key and value of every
    sequence once, and does about two FLOPs per weight per sequence. Below a batch of a few hundred that is
    far less arithmetic than the tensor cores could do in the time the bytes take to arrive (bf16: 2 FLOPs
    per 2-byte weight and sequence against the H100's ridge of 989 / 3.35 ≈ 295 FLOP/B), so the step takes

        bytes per step = weight_bytes + batch_size · context · cache_bytes_per_token
        step time      ≥ bytes per step / HBM bandwidth,   tokens/s = batch_size / step time

    (the decode roofline of Pope et al., 2022, section 3; bandwidths: :data:`attn_edu.hardware.GPUS`).
    ``fits`` says whether weights and cache fit in the GPU's memory at all. Real servers reach 50-80 % of it.

    Example:
        >>> llama = dict(weight_bytes=13_476_831_232, cache_bytes_per_token=32 * 2 * 32 * 128 * 2)  # Llama-2-7B
        >>> row = decode_roofline(**llama, context=4096)
        >>> round(row["tokens_per_s"]), row["fits"]
        (214, True)
        >>> decode_roofline(**llama, context=131072)["fits"]        # 69 GB of cache besides 13.5 GB of weights
        False
    """
    for name, value in [
        ("weight_bytes", weight_bytes),
        ("cache_bytes_per_token", cache_bytes_per_token),
        ("context", context),
        ("batch_size", batch_size),
    ]:
        check_positive_int(name, value)
    if gpu not in GPUS:
        raise ValueError(f"gpu: expected one of {sorted(GPUS)}, got {gpu!r}")
    total = weight_bytes + batch_size * context * cache_bytes_per_token  # bytes read per step
    step_s = total / (GPUS[gpu]["hbm_tb_s"] * 1e12)
    return {
        "bytes_per_step": total,
        "cache_share": 1 - weight_bytes / total,
        "step_ms": 1000 * step_s,
        "tokens_per_s": batch_size / step_s,
        "fits": total <= GPUS[gpu]["memory_gb"] * 1e9,
    }
