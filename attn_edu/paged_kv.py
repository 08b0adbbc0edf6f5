"""A paged KV cache (vLLM: Kwon et al., SOSP 2023, "Efficient Memory Management for Large Language Model Serving
with PagedAttention"): keys and values in fixed-size blocks from one shared pool, found through a block table.

A contiguous cache (:class:`attn_edu.kv_cache.KVCacheLayer` with ``max_len``) reserves a sequence's longest possible
length up front; a server holding many sequences of unknown, mixed lengths then keeps most of its memory for tokens
that never come (the paper measures only 20-38 % of the KV memory holding tokens in earlier systems, its Figure 2). vLLM
borrows the operating system's answer, paging (section 4.1-4.2): the memory is cut into *blocks* of ``block_size``
tokens, a sequence takes a block only when its previous one is full, and a *block table* maps its logical blocks to
physical ones anywhere in the pool. Token ``t`` lives in physical block ``block_table[t // block_size]``, slot
``t % block_size``, so a sequence wastes less than one block, however long it runs.

Blocks also make sharing cheap (section 4.4): two sequences with a common prefix (one system prompt, or several
samples of one prompt) point their tables at the same full blocks, counted by a reference count; a block that one
of them would write into is copied first (*copy-on-write*), so neither ever sees the other's tokens.

:class:`PagedKVCache` keeps :class:`attn_edu.kv_cache.KVCache`'s interface for one sequence, so every model here
decodes through it unchanged. Deviation from vLLM: its attention kernel reads the blocks where they lie; here
:func:`gather_blocks` copies them into one contiguous tensor for the reference attention (the same ``O(S)`` copy per
step as the concatenating cache), so the lesson is the memory, not the speed.

Shapes:
    pool storage per layer ``(num_blocks, H_kv, block_size, D)``; ``update``: k, v ``(1, H_kv, T, D)``, returns
    ``(1, H_kv, S, D)``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from attn_edu._validate import check_positive_int, check_shape
from attn_edu.kv_cache import KVCache


class BlockPool:
    """The physical KV memory that every sequence draws from: ``num_blocks`` blocks of ``block_size`` tokens, all
    allocated up front, with a free list and a reference count per block (vLLM's block allocator, section 4.2).

    ``k[layer]`` and ``v[layer]`` hold the blocks of one layer; block ``b`` of a sequence is the same index ``b`` in
    every layer (a sequence takes one block for all its layers at once, as vLLM does).

    Shapes:
        ``k[layer]``: ``(num_blocks, H_kv, block_size, D)``; ``v[layer]``: ``(num_blocks, H_kv, block_size, Dv)``.

    Example:
        >>> pool = BlockPool(num_layers=2, num_blocks=4, block_size=16, num_kv_heads=2, head_dim=8)
        >>> tuple(pool.k[0].shape)                       # (num_blocks, H_kv, block_size, D)
        (4, 2, 16, 8)
        >>> block = pool.allocate()
        >>> pool.used_blocks, pool.free_blocks, pool.block_bytes()   # 2 layers × (K, V) × 2 × 16 × 8 × 4 bytes
        (1, 3, 4096)
        >>> pool.release(block)
        >>> pool.free_blocks
        4
    """

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        head_dim_v: int | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.num_blocks = check_positive_int("num_blocks", num_blocks)
        self.block_size = check_positive_int("block_size", block_size)
        self.num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.head_dim_v = head_dim if head_dim_v is None else check_positive_int("head_dim_v", head_dim_v)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")
        self.dtype = dtype
        shape = (num_blocks, num_kv_heads, block_size)
        self.k = [torch.zeros(*shape, head_dim, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(*shape, self.head_dim_v, dtype=dtype, device=device) for _ in range(num_layers)]
        self.device = self.k[0].device
        self._free = deque(range(num_blocks))  # the lowest ids first, so a fresh pool hands out 0, 1, 2, ...
        self._refcount = [0] * num_blocks  # sequences whose block table holds the block

    @property
    def free_blocks(self) -> int:
        """Blocks no sequence holds."""
        return len(self._free)

    @property
    def used_blocks(self) -> int:
        """Blocks held by at least one sequence (a shared block counts once)."""
        return self.num_blocks - len(self._free)

    def refcount(self, block: int) -> int:
        """How many sequences hold ``block`` (0: it is free)."""
        return self._refcount[self._check_block(block)]

    def _check_block(self, block: int) -> int:
        if isinstance(block, bool) or not isinstance(block, int) or not 0 <= block < self.num_blocks:
            raise ValueError(
                f"block: expected an int from 0 to num_blocks - 1 = {self.num_blocks - 1}, got {block!r}"
            )
        return block

    def allocate(self) -> int:
        """Take a free block (reference count 1) and return its id."""
        if not self._free:
            raise ValueError(
                f"num_blocks: all {self.num_blocks} blocks of the pool are in use; release a sequence "
                "(reset or crop it) or make a larger pool"
            )
        block = self._free.popleft()
        self._refcount[block] = 1
        return block

    def retain(self, block: int) -> None:
        """One more sequence holds ``block`` (it must be in use already)."""
        if self.refcount(block) == 0:
            raise ValueError(f"block: {block} is free; allocate a block before sharing it")
        self._refcount[block] += 1

    def release(self, block: int) -> None:
        """One sequence lets go of ``block``; at reference count 0 it goes back to the free list."""
        if self.refcount(block) == 0:
            raise ValueError(f"block: {block} is free already (released twice?)")
        self._refcount[block] -= 1
        if self._refcount[block] == 0:
            self._free.append(block)

    def copy(self, source: int, target: int) -> None:
        """Copy block ``source`` into block ``target`` in every layer (the copy of copy-on-write)."""
        self._check_block(source)
        self._check_block(target)
        for storage in (*self.k, *self.v):
            storage[target] = storage[source]  # (H_kv, block_size, D)

    def block_bytes(self) -> int:
        """Bytes of one block over all layers, keys and values: ``layers × H_kv × block_size × (D + Dv) × bytes``."""
        return sum(s[0].numel() * s.element_size() for s in (*self.k, *self.v))

    def nbytes(self) -> int:
        """Bytes of the whole pool (held from the start, whether the blocks are used or not)."""
        return self.num_blocks * self.block_bytes()


def gather_blocks(storage: torch.Tensor, block_table: torch.Tensor | list[int], length: int) -> torch.Tensor:
    """The first ``length`` tokens of a sequence, read through its block table into one contiguous tensor.

    Token ``t`` lives in physical block ``block_table[t // block_size]``, slot ``t % block_size``: select the
    sequence's blocks in table order, lay their slots end to end, and cut at ``length``.

    Shapes:
        storage ``(num_blocks, H_kv, block_size, D)``; block_table ``(n,)`` int; returns ``(H_kv, length, D)``.

    Example:
        >>> storage = torch.arange(8.0).view(4, 1, 2, 1)   # block b holds the numbers 2b, 2b + 1
        >>> gather_blocks(storage, [3, 0, 2], 5).flatten().tolist()
        [6.0, 7.0, 0.0, 1.0, 4.0]
    """
    num_blocks, H_kv, block_size, D = check_shape("storage", storage, "N H_kv block_size D").values()
    table = torch.as_tensor(block_table, dtype=torch.int64, device=storage.device)
    if table.dim() != 1:
        raise ValueError(
            f"block_table: expected a 1-D list of block ids (n,), got shape {tuple(table.shape)}"
        )
    capacity = table.numel() * block_size
    if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= capacity:
        raise ValueError(
            f"length: expected an int from 0 to the table's capacity, {table.numel()} blocks × "
            f"block_size {block_size} = {capacity} tokens, got {length!r}"
        )
    table = table[: -(-length // block_size)]  # the blocks that hold tokens 0 .. length - 1
    if table.numel() and not bool((table >= 0).all() and (table < num_blocks).all()):
        raise ValueError(f"block_table: block ids must lie in 0 .. {num_blocks - 1}, got {table.tolist()}")
    blocks = storage.index_select(0, table)  # (n, H_kv, block_size, D)
    tokens = blocks.transpose(0, 1).reshape(H_kv, -1, D)  # (H_kv, n · block_size, D), token t at row t
    return tokens[:, :length]  # (H_kv, length, D)


class PagedKVCacheLayer:
    """One layer's view of a :class:`PagedKVCache`: writes the new tokens into the sequence's blocks of this layer
    and reads every token back through the block table (the table itself belongs to the sequence).

    Shapes:
        ``update``: k, v ``(1, H_kv, T, D)``; returns k_all, v_all ``(1, H_kv, S, D)``, ``S = seq_len``.
    """

    def __init__(self, cache: PagedKVCache, index: int) -> None:
        self.cache, self.index = cache, index
        self._seq_len = 0

    @property
    def seq_len(self) -> int:
        """Tokens stored in this layer (the position of the next token)."""
        return self._seq_len

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k, v`` (the new tokens) into their blocks and return all keys and values stored so far."""
        pool = self.cache.pool
        if k.dim() == 4 and k.shape[0] != 1:
            raise ValueError(
                f"k: a paged cache holds one sequence, shape (1, H_kv, T, D); got {tuple(k.shape)} "
                "(give each sequence its own PagedKVCache over one BlockPool)"
            )
        T = check_shape("k", k, "1 H_kv T D", H_kv=pool.num_kv_heads, D=pool.head_dim)["T"]
        check_shape("v", v, "1 H_kv T Dv", H_kv=pool.num_kv_heads, T=T, Dv=pool.head_dim_v)
        for name, x in (("k", k), ("v", v)):
            if x.dtype != pool.dtype or x.device != pool.device:
                raise ValueError(
                    f"{name}: expected {pool.dtype} on {pool.device} (the pool's), got {x.dtype} on {x.device}"
                )
        start, new_len = self._seq_len, self._seq_len + T
        self.cache._reserve(new_len)  # the first layer to get here takes the blocks for every layer
        positions = torch.arange(start, new_len)  # (T,) the new tokens' places in the sequence
        table = torch.tensor(self.cache.block_table, dtype=torch.int64)  # (n,)
        blocks = table[positions // pool.block_size]  # (T,) the physical block of each new token
        slots = positions % pool.block_size  # (T,) its slot in that block
        written = sorted(set(blocks.tolist()))
        # Never true: fork and crop copy a shared block before this sequence could write into it.
        if any(pool.refcount(b) != 1 for b in written):
            raise RuntimeError(f"copy-on-write broken: a block of {written} is shared; not writing into it")
        blocks, slots = blocks.to(pool.device), slots.to(pool.device)
        # Advanced indices on dims 0 and 2 around a slice put the T index pairs first: (T, H_kv, D) per side.
        pool.k[self.index][blocks, :, slots] = k[0].transpose(0, 1)  # (T, H_kv, D)
        pool.v[self.index][blocks, :, slots] = v[0].transpose(0, 1)  # (T, H_kv, Dv)
        self._seq_len = new_len
        k_all = gather_blocks(pool.k[self.index], self.cache.block_table, new_len)  # (H_kv, S, D)
        v_all = gather_blocks(pool.v[self.index], self.cache.block_table, new_len)  # (H_kv, S, Dv)
        return k_all[None], v_all[None]  # (1, H_kv, S, D)

    def nbytes(self) -> int:
        """Bytes of this layer's share of the blocks the sequence holds (K and V)."""
        pool = self.cache.pool
        per_block = sum(s[0].numel() * s.element_size() for s in (pool.k[self.index], pool.v[self.index]))
        return len(self.cache.block_table) * per_block

    def reset(self) -> None:
        """Forget this layer's tokens; blocks no layer needs any more go back to the pool."""
        self._seq_len = 0
        self.cache._trim()


class PagedKVCache(KVCache):
    """One sequence's KV cache in blocks of a shared :class:`BlockPool`, with :class:`attn_edu.kv_cache.KVCache`'s
    interface: ``model(input_ids, kv_cache=cache)`` works for every decoder here (batch 1).

    ``block_table`` lists the physical blocks of the sequence, logical block ``i`` first; all layers share it.
    ``nbytes()`` counts the blocks held (a block shared with a fork counts in both: the pool's ``used_blocks`` is
    the memory actually in use). ``crop`` and ``reset`` give whole blocks back to the pool; :meth:`fork` starts a
    second sequence on this one's prefix without copying its full blocks.

    Example:
        >>> from attn_edu.models import GPT, GPTConfig
        >>> model = GPT(GPTConfig(vocab_size=10, embed_dim=16, num_layers=2, num_heads=2)).eval()
        >>> pool = BlockPool(num_layers=2, num_blocks=8, block_size=4, num_kv_heads=2, head_dim=8)
        >>> cache = PagedKVCache(pool)
        >>> logits = model(torch.randint(10, (1, 9)), kv_cache=cache)
        >>> cache.seq_len, len(cache.block_table), pool.free_blocks   # 9 tokens in 3 blocks of 4
        (9, 3, 5)
        >>> child = cache.fork(8)                  # blocks 0 and 1 shared, nothing copied
        >>> child.block_table[:2] == cache.block_table[:2], pool.refcount(cache.block_table[0])
        (True, 2)
    """

    def __init__(self, pool: BlockPool) -> None:
        if not isinstance(pool, BlockPool):
            raise ValueError(f"pool: expected a BlockPool, got {type(pool).__name__}")
        super().__init__(pool.num_layers)
        self.pool = pool
        self.block_table: list[int] = []  # physical block of logical block i, shared by all layers
        self.layers = [PagedKVCacheLayer(self, i) for i in range(pool.num_layers)]  # type: ignore[misc]

    def _reserve(self, length: int) -> None:
        """Hold enough blocks for ``length`` tokens, taking them all or none."""
        needed = -(-length // self.pool.block_size) - len(self.block_table)
        if needed > self.pool.free_blocks:
            raise ValueError(
                f"num_blocks: {length} tokens need {needed} more blocks of {self.pool.block_size}, but only "
                f"{self.pool.free_blocks} of the pool's {self.pool.num_blocks} are free"
            )
        self.block_table += [self.pool.allocate() for _ in range(max(needed, 0))]

    def _trim(self) -> None:
        """Give back the blocks past the longest layer; copy a shared, partly filled last block (copy-on-write) so
        that the next token is written into a block this sequence holds alone."""
        length = max(layer.seq_len for layer in self.layers)
        keep = -(-length // self.pool.block_size)
        for block in self.block_table[keep:]:
            self.pool.release(block)
        del self.block_table[keep:]
        last = self.block_table[-1] if self.block_table else None
        if last is not None and length % self.pool.block_size and self.pool.refcount(last) > 1:
            self.block_table[-1] = self.pool.allocate()
            self.pool.copy(last, self.block_table[-1])
            self.pool.release(last)

    def nbytes(self) -> int:
        """Bytes of the blocks this sequence holds: ``len(block_table) × pool.block_bytes()``."""
        return len(self.block_table) * self.pool.block_bytes() + sum(c.nbytes() for c in self.cross_layers)

    def crop(self, length: int) -> None:
        """Keep the first ``length`` tokens (speculative decoding's rejected guesses go) and give back whole blocks
        no longer needed."""
        seq_len = self.seq_len
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= seq_len:
            raise ValueError(f"length: expected an int from 0 to seq_len = {seq_len}, got {length!r}")
        for layer in self.layers:
            layer._seq_len = min(layer.seq_len, length)
        self._trim()

    def reset(self) -> None:
        """Forget every token and give every block back to the pool."""
        self.crop(0)
        for layer in self.cross_layers:
            layer.reset()

    def fork(self, length: int | None = None) -> PagedKVCache:
        """A new sequence whose first ``length`` tokens (default: all) are this one's (vLLM's prefix sharing).

        Full blocks are shared, not copied (their reference count goes up by one); a partly filled last block is
        copied into a fresh block so that both sequences can write on. A second prompt with a common prefix then
        only runs its suffix: ``model(ids[:, length:], kv_cache=cache.fork(length))``.
        """
        seq_len = self.seq_len
        if any(layer.seq_len != seq_len for layer in self.layers):
            raise ValueError("fork: the layers hold different lengths (in the middle of a forward pass?)")
        length = seq_len if length is None else length
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= seq_len:
            raise ValueError(f"length: expected an int from 0 to seq_len = {seq_len}, got {length!r}")
        child = PagedKVCache(self.pool)
        full, partial = divmod(length, self.pool.block_size)
        if partial and self.pool.free_blocks == 0:
            raise ValueError(
                f"num_blocks: the pool's {self.pool.num_blocks} blocks are in use; no room to fork"
            )
        for block in self.block_table[:full]:
            self.pool.retain(block)
        child.block_table = self.block_table[:full]
        if partial:  # copy-on-write, done at once: the child's next token goes into this block
            child.block_table.append(self.pool.allocate())
            self.pool.copy(self.block_table[full], child.block_table[-1])
        for layer in child.layers:
            layer._seq_len = length
        return child


@dataclass(frozen=True)
class MemoryUse:
    """KV memory of a batch of sequences under one storage strategy, measured from the cache objects."""

    held_bytes: int  # what the caches' nbytes() report after the tokens are written
    needed_bytes: int  # what the tokens themselves take (a cache of exactly their length)
    bytes_per_token: int  # layers × H_kv × (D + Dv) × bytes per number

    @property
    def waste_bytes(self) -> int:
        """Held but holding no token: ``held_bytes - needed_bytes``."""
        return self.held_bytes - self.needed_bytes

    @property
    def waste_tokens(self) -> int:
        """The waste in token slots."""
        return self.waste_bytes // self.bytes_per_token


def paged_memory(
    lengths: list[int],
    *,
    max_len: int,
    block_size: int,
    num_layers: int = 1,
    num_kv_heads: int = 2,
    head_dim: int = 8,
    dtype: torch.dtype = torch.float32,
) -> dict[str, MemoryUse]:
    """Write ``lengths[i]`` tokens for each sequence into three kinds of cache and measure what each holds:
    ``"contiguous"`` (each sequence reserves ``max_len``: :class:`attn_edu.kv_cache.KVCacheLayer` with ``max_len``),
    ``"paged"`` (:class:`PagedKVCache` blocks of ``block_size`` from one pool) and ``"exact"`` (concatenation: the
    tokens themselves). Contiguous wastes ``Σ (max_len − len)`` token slots, paged less than one block per sequence.

    Example:
        >>> use = paged_memory([5, 16, 30], max_len=64, block_size=16)
        >>> use["contiguous"].waste_tokens, use["paged"].waste_tokens, use["exact"].waste_tokens
        (141, 13, 0)
    """
    check_positive_int("max_len", max_len)
    check_positive_int("block_size", block_size)
    valid = [not isinstance(n, bool) and isinstance(n, int) and 0 < n <= max_len for n in lengths]
    if not lengths or not all(valid):
        raise ValueError(
            f"lengths: expected a non-empty list of ints from 1 to max_len = {max_len}, got {lengths!r}"
        )
    pool = BlockPool(
        num_layers, sum(-(-n // block_size) for n in lengths), block_size, num_kv_heads, head_dim, dtype=dtype
    )
    held = {"contiguous": 0, "paged": 0, "exact": 0}
    for n in lengths:
        k = torch.zeros(1, num_kv_heads, n, head_dim, dtype=dtype)  # (1, H_kv, T, D): only its bytes matter
        caches = {
            "contiguous": KVCache(num_layers, max_len=max_len),
            "paged": PagedKVCache(pool),
            "exact": KVCache(num_layers),
        }
        for name, cache in caches.items():
            for layer in cache.layers:
                layer.update(k, k)
            held[name] += cache.nbytes()
    per_token = held["exact"] // sum(lengths)
    return {name: MemoryUse(b, held["exact"], per_token) for name, b in held.items()}


__all__ = ["BlockPool", "MemoryUse", "PagedKVCache", "PagedKVCacheLayer", "gather_blocks", "paged_memory"]
