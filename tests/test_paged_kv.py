"""The paged KV cache (vLLM): the block-table lookup equals reading token by token; a model decodes through it as
through the contiguous cache and the full pass, whatever the block size; forks share full blocks and never write
into them; crop and reset give blocks back; paged memory wastes under a block per sequence."""

from __future__ import annotations

import pytest
import torch

from attn_edu.kv_cache import KVCache, kv_cache_bytes
from attn_edu.models import GPT, GPTConfig, Llama, LlamaConfig
from attn_edu.multihead import SupportsKVCache
from attn_edu.paged_kv import BlockPool, PagedKVCache, gather_blocks, paged_memory

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

VOCAB = 24


def _gpt() -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=VOCAB, max_seq_len=32, embed_dim=16, num_layers=2, num_heads=2, ffn_dim=32)
    return GPT(config).eval()


def _llama() -> Llama:  # grouped-query attention: 4 query heads read 2 key/value heads
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, embed_dim=16, num_layers=2, num_heads=4, num_kv_heads=2, ffn_dim=32
    )
    return Llama(config).eval()


def _pool(model: GPT | Llama, block_size: int, num_blocks: int = 64) -> BlockPool:
    cfg = model.config
    kv_heads = getattr(cfg, "num_kv_heads", cfg.num_heads)
    return BlockPool(cfg.num_layers, num_blocks, block_size, kv_heads, cfg.embed_dim // cfg.num_heads)


def _ids(length: int, seed: int) -> torch.Tensor:
    return torch.randint(VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


def _decode(model: GPT | Llama, ids: torch.Tensor, cache: KVCache, prompt: int) -> list[torch.Tensor]:
    """Logits of the prompt, then of one token at a time, as generation feeds them."""
    with torch.no_grad():
        steps = [model(ids[:, :prompt], kv_cache=cache)]
        steps += [model(ids[:, t : t + 1], kv_cache=cache) for t in range(prompt, ids.shape[1])]
    return steps


def _feed(model: GPT | Llama, ids: torch.Tensor, cache: KVCache, start: int) -> torch.Tensor:
    """Logits of ``ids[:, start:]`` fed one token at a time after ``start`` already cached: ``(1, T - start, V)``."""
    with torch.no_grad():
        return torch.cat(
            [model(ids[:, t : t + 1], kv_cache=cache) for t in range(start, ids.shape[1])], dim=1
        )


def _shuffle_free_list(pool: BlockPool, seed: int) -> None:
    """Take every block and give them back in a random order, as a busy server's pool would hand them out."""
    blocks = [pool.allocate() for _ in range(pool.num_blocks)]
    for i in torch.randperm(len(blocks), generator=torch.Generator().manual_seed(seed)).tolist():
        pool.release(blocks[i])


def _blocks_of(pool: BlockPool, blocks: list[int]) -> list[torch.Tensor]:
    """A copy of what ``blocks`` hold, every layer, K and V."""
    return [storage[blocks].clone() for storage in (*pool.k, *pool.v)]


def test_paged_layer_satisfies_the_attention_protocol() -> None:
    cache = PagedKVCache(BlockPool(1, 2, 4, 1, 2))
    assert isinstance(cache.layers[0], SupportsKVCache) and len(cache) == 1


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
@pytest.mark.parametrize("length", [0, 1, 7, 16, 29])
def test_gather_blocks_equals_a_per_token_loop_on_a_scrambled_table(block_size: int, length: int) -> None:
    generator = torch.Generator().manual_seed(block_size * 100 + length)
    num_blocks = 40
    storage = torch.randn(num_blocks, 3, block_size, 5, generator=generator)
    needed = -(-length // block_size) + 1  # one spare block past the end of the tokens
    table = torch.randperm(num_blocks, generator=generator)[:needed]
    naive = storage.new_zeros(3, length, 5)  # (H_kv, length, D), filled one token at a time
    for t in range(length):
        naive[:, t] = storage[table[t // block_size], :, t % block_size]
    assert torch.equal(gather_blocks(storage, table, length), naive)
    assert torch.equal(gather_blocks(storage, table.tolist(), length), naive)


def test_gather_blocks_refuses_a_length_past_the_table_and_ids_outside_the_pool() -> None:
    storage = torch.zeros(4, 1, 2, 3)
    with pytest.raises(ValueError, match=r"length: .* 2 blocks × block_size 2 = 4 tokens, got 5"):
        gather_blocks(storage, [0, 1], 5)
    with pytest.raises(ValueError, match="block_table: block ids must lie in 0 .. 3"):
        gather_blocks(storage, [0, 4], 3)
    with pytest.raises(ValueError, match="block_table: expected a 1-D"):
        gather_blocks(storage, [[0, 1]], 2)
    with pytest.raises(ValueError, match="storage: expected shape"):
        gather_blocks(torch.zeros(4, 2, 3), [0], 1)


@pytest.mark.parametrize("make_model", [_gpt, _llama], ids=["gpt", "llama_gqa"])
@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
def test_decoding_through_pages_equals_the_contiguous_cache_and_the_full_pass(
    make_model, block_size: int
) -> None:
    """Two sequences decode in turn from one pool, so their blocks interleave and neither's table is in order."""
    model = make_model()
    pool = _pool(model, block_size)
    _shuffle_free_list(pool, seed=block_size)
    ids = [_ids(14, seed=1), _ids(11, seed=2)]
    prompts = [5, 7]
    paged = [PagedKVCache(pool), PagedKVCache(pool)]
    steps: list[list[torch.Tensor]] = [[], []]
    with torch.no_grad():
        for s in range(2):
            steps[s].append(model(ids[s][:, : prompts[s]], kv_cache=paged[s]))
        for t in range(max(x.shape[1] for x in ids)):
            for s in range(2):
                if prompts[s] <= t < ids[s].shape[1]:
                    steps[s].append(model(ids[s][:, t : t + 1], kv_cache=paged[s]))
        for s in range(2):
            logits = torch.cat(steps[s], dim=1)  # (1, T, V)
            contiguous = torch.cat(_decode(model, ids[s], KVCache(2), prompts[s]), dim=1)
            assert torch.equal(logits, contiguous), (logits - contiguous).abs().max()
            torch.testing.assert_close(logits, model(ids[s]), atol=1e-6, rtol=1e-5)
            assert paged[s].seq_len == ids[s].shape[1]
            assert len(paged[s].block_table) == -(-ids[s].shape[1] // block_size)  # only the blocks it needs
    assert not set(paged[0].block_table) & set(paged[1].block_table)
    if block_size < 11:
        assert paged[0].block_table != sorted(paged[0].block_table)  # scattered over the pool
    assert pool.used_blocks == len(paged[0].block_table) + len(paged[1].block_table)


def test_nbytes_counts_the_blocks_held() -> None:
    model = _llama()
    pool = _pool(model, block_size=4)
    cache = PagedKVCache(pool)
    _decode(model, _ids(9, seed=3), cache, prompt=9)
    one_block = kv_cache_bytes(num_layers=2, num_kv_heads=2, seq_len=4, head_dim=4, dtype_bytes=4)
    assert pool.block_bytes() == one_block and pool.nbytes() == 64 * one_block
    assert cache.nbytes() == 3 * one_block == sum(layer.nbytes() for layer in cache.layers)


@pytest.mark.parametrize("make_model", [_gpt, _llama], ids=["gpt", "llama_gqa"])
@pytest.mark.parametrize(("block_size", "prefix"), [(4, 10), (4, 8), (3, 10), (16, 10)])
def test_a_fork_shares_the_prefix_full_blocks_and_runs_only_its_suffix(
    make_model, block_size, prefix
) -> None:
    model = make_model()
    pool = _pool(model, block_size)
    first, second = _ids(13, seed=4), _ids(12, seed=5)
    second[:, :prefix] = first[:, :prefix]  # a common prefix
    parent = PagedKVCache(pool)
    _decode(model, first, parent, prompt=13)
    child = parent.fork(prefix)
    full = prefix // block_size
    shared = parent.block_table[:full]
    assert child.block_table[:full] == shared and child.seq_len == prefix
    assert all(pool.refcount(b) == 2 for b in shared)
    assert all(pool.refcount(b) == 1 for b in parent.block_table[full:] + child.block_table[full:])
    before = _blocks_of(pool, shared)

    with torch.no_grad():
        suffix = model(second[:, prefix:], kv_cache=child)  # (1, 12 - prefix, V)
        fresh = model(second, kv_cache=KVCache(2))[:, prefix:]
    # The prefix's keys came from a longer pass than the fresh cache's: equal up to float rounding.
    torch.testing.assert_close(suffix, fresh, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(suffix, model(second)[:, prefix:], atol=1e-6, rtol=1e-5)

    # Blocks saved: the prefix's full blocks, against two sequences each holding its own.
    apart = -(-first.shape[1] // block_size) + -(-second.shape[1] // block_size)
    assert apart - pool.used_blocks == full

    # Both write on; each still reads its own tokens, and the shared blocks never change.
    more = _ids(4, seed=6)
    with torch.no_grad():
        for t in range(4):
            for cache, ids in ((parent, first), (child, second)):
                got = model(more[:, t : t + 1], kv_cache=cache)
                want = model(torch.cat([ids, more[:, : t + 1]], dim=1))[:, -1:]
                torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(before, _blocks_of(pool, shared)))


def test_writing_into_a_shared_block_is_refused() -> None:
    pool = BlockPool(1, 4, 4, 1, 2)
    cache = PagedKVCache(pool)
    cache.layers[0].update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
    # As if another sequence held the partly filled block without having copied it:
    pool.retain(cache.block_table[0])
    with pytest.raises(RuntimeError, match="copy-on-write broken"):
        cache.layers[0].update(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
    assert torch.equal(pool.k[0][cache.block_table[0]], torch.zeros(1, 4, 2))


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
def test_crop_then_decode_equals_a_fresh_decode(block_size: int) -> None:
    model = _gpt()
    pool = _pool(model, block_size)
    ids = _ids(13, seed=7)
    cache = PagedKVCache(pool)
    _decode(model, ids, cache, prompt=10)
    cache.crop(6)  # speculative decoding's rejected guesses go
    assert cache.seq_len == 6 and len(cache.block_table) == -(-6 // block_size)
    assert pool.used_blocks == len(cache.block_table)
    other = _ids(5, seed=8)
    resumed = torch.cat([ids[:, :6], other], dim=1)
    got = _feed(model, resumed, cache, start=6)  # the tokens after the crop
    fresh = torch.cat(_decode(model, resumed, KVCache(2), prompt=6), dim=1)[:, 6:]
    torch.testing.assert_close(got, fresh, atol=1e-6, rtol=1e-5)


def test_cropping_into_a_shared_block_copies_it_before_writing() -> None:
    model = _gpt()
    pool = _pool(model, block_size=4)
    ids = _ids(12, seed=9)
    parent = PagedKVCache(pool)
    _decode(model, ids, parent, prompt=12)
    child = parent.fork()  # 12 tokens: three full blocks, all shared
    before = _blocks_of(pool, child.block_table)
    parent.crop(6)  # the middle of the second block, which the child still reads
    assert parent.block_table[0] == child.block_table[0] and parent.block_table[1] != child.block_table[1]
    other = _ids(6, seed=10)
    resumed = torch.cat([ids[:, :6], other], dim=1)
    got = _feed(model, resumed, parent, start=6)
    fresh = torch.cat(_decode(model, resumed, KVCache(2), prompt=6), dim=1)[:, 6:]
    torch.testing.assert_close(got, fresh, atol=1e-6, rtol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(before, _blocks_of(pool, child.block_table)))


def test_reset_of_every_sequence_gives_every_block_back() -> None:
    model = _llama()
    pool = _pool(model, block_size=3, num_blocks=16)
    parent = PagedKVCache(pool)
    _decode(model, _ids(10, seed=11), parent, prompt=10)
    children = [parent.fork(7), parent.fork()]
    for child in children:
        _decode(model, _ids(3, seed=12), child, prompt=3)
    assert pool.free_blocks < pool.num_blocks
    for cache in (children[0], parent, children[1]):
        cache.reset()
        assert cache.seq_len == 0 and cache.block_table == [] and cache.nbytes() == 0
    assert pool.free_blocks == pool.num_blocks and pool.used_blocks == 0
    assert all(pool.refcount(b) == 0 for b in range(pool.num_blocks))


def test_running_out_of_blocks_says_so_and_takes_nothing() -> None:
    pool = BlockPool(1, 3, 4, 1, 2)
    cache = PagedKVCache(pool)
    cache.layers[0].update(torch.zeros(1, 1, 9, 2), torch.zeros(1, 1, 9, 2))  # 3 blocks, the whole pool
    other = PagedKVCache(pool)
    with pytest.raises(
        ValueError, match=r"num_blocks: 1 tokens need 1 more blocks .* only 0 of the pool's 3"
    ):
        other.layers[0].update(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
    assert other.block_table == [] and other.seq_len == 0
    with pytest.raises(ValueError, match="num_blocks: all 3 blocks of the pool are in use"):
        pool.allocate()
    with pytest.raises(ValueError, match="num_blocks"):
        cache.fork(6)  # a partly filled block to copy, and no block to copy it into
    assert pool.refcount(cache.block_table[0]) == 1  # the failed fork shared nothing


def test_refcounts_refuse_a_free_block() -> None:
    pool = BlockPool(1, 2, 4, 1, 2)
    with pytest.raises(ValueError, match="block: 0 is free; allocate"):
        pool.retain(0)
    block = pool.allocate()
    pool.retain(block)
    pool.release(block)
    assert pool.free_blocks == 1
    pool.release(block)
    assert pool.free_blocks == 2
    with pytest.raises(ValueError, match="block: 0 is free already"):
        pool.release(block)
    with pytest.raises(ValueError, match="block: expected an int from 0 to num_blocks - 1 = 1"):
        pool.refcount(2)


def test_paged_waste_is_under_a_block_per_sequence_contiguous_wastes_the_reservation() -> None:
    lengths, max_len, block_size = [37, 120, 5, 300, 64, 211, 18, 512], 512, 16
    use = paged_memory(
        lengths, max_len=max_len, block_size=block_size, num_layers=2, num_kv_heads=2, head_dim=8
    )
    token = kv_cache_bytes(num_layers=2, num_kv_heads=2, seq_len=1, head_dim=8, dtype_bytes=4)
    assert {u.needed_bytes for u in use.values()} == {sum(lengths) * token}
    assert use["exact"].waste_bytes == 0
    assert use["contiguous"].held_bytes == len(lengths) * max_len * token
    assert use["contiguous"].waste_tokens == sum(max_len - n for n in lengths)
    assert use["paged"].held_bytes % (block_size * token) == 0  # whole blocks
    assert 0 <= use["paged"].waste_tokens < block_size * len(lengths)
    # Only the empty slots of each sequence's last block:
    assert use["paged"].waste_tokens == sum(-n % block_size for n in lengths)


def test_bad_inputs_name_the_argument() -> None:
    pool = BlockPool(1, 4, 4, num_kv_heads=2, head_dim=8)
    layer = PagedKVCache(pool).layers[0]
    with pytest.raises(
        ValueError, match=r"k: a paged cache holds one sequence, shape \(1, H_kv, T, D\); got \(2,"
    ):
        layer.update(torch.zeros(2, 2, 1, 8), torch.zeros(2, 2, 1, 8))
    with pytest.raises(
        ValueError, match=r"k: expected shape \(1, H_kv, T, D\) with H_kv=2, D=8, got \(1, 3, 1, 8\)"
    ):
        layer.update(torch.zeros(1, 3, 1, 8), torch.zeros(1, 3, 1, 8))
    with pytest.raises(ValueError, match=r"v: expected shape"):
        layer.update(torch.zeros(1, 2, 1, 8), torch.zeros(1, 2, 2, 8))
    with pytest.raises(ValueError, match="k: expected torch.float32 .* got torch.float64"):
        layer.update(
            torch.zeros(1, 2, 1, 8, dtype=torch.float64), torch.zeros(1, 2, 1, 8, dtype=torch.float64)
        )
    assert layer.seq_len == 0 and pool.free_blocks == 4  # nothing was written or taken
    with pytest.raises(ValueError, match="dtype: expected a floating-point"):
        BlockPool(1, 4, 4, 2, 8, dtype=torch.int8)
    with pytest.raises(ValueError, match="block_size: expected a positive int"):
        BlockPool(1, 4, 0, 2, 8)
    with pytest.raises(ValueError, match="pool: expected a BlockPool"):
        PagedKVCache(KVCache(1))  # type: ignore[arg-type]
    cache = PagedKVCache(pool)
    with pytest.raises(ValueError, match="length: expected an int from 0 to seq_len = 0"):
        cache.crop(1)
    with pytest.raises(ValueError, match="length: expected an int from 0 to seq_len = 0"):
        cache.fork(1)
    with pytest.raises(ValueError, match="lengths: expected a non-empty list of ints from 1 to max_len = 8"):
        paged_memory([3, 9], max_len=8, block_size=4)
