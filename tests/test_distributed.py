"""Ring attention on real processes: equal to full attention (output and gradients) for 2, 3 and 4 ranks, both
layouts, causal or not, lengths the ranks do not divide; the load balance and the bytes it claims; and bad input
or a failing rank ends every rank with an error instead of a hang.

The functions that run on the ranks live at module level: :func:`attn_edu.distributed.launch` starts fresh
processes, which import them."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from attn_edu import distributed
from attn_edu.bench import ring as bench
from attn_edu.distributed import launch, ring_attention, shard, shard_chunks, unshard


@pytest.mark.parametrize("layout", distributed.LAYOUTS)
@pytest.mark.parametrize(("length", "ranks"), [(7, 2), (13, 3), (16, 4), (9, 1)])
def test_shards_cover_the_sequence_once_and_unshard_inverts_shard(
    layout: str, length: int, ranks: int
) -> None:
    held = shard_chunks(length, ranks, layout)
    positions = sorted(p for chunks in held for start, end in chunks for p in range(start, end))
    assert positions == list(range(length))
    sizes = [sum(end - start for start, end in chunks) for chunks in held]
    assert max(sizes) - min(sizes) <= (1 if layout == "contiguous" else 2)
    x = torch.randn(2, length, 3)
    assert torch.equal(unshard([shard(x, r, ranks, layout) for r in range(ranks)], layout), x)


def test_shard_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="layout: expected one of"):
        shard_chunks(8, 2, "striped")
    with pytest.raises(ValueError, match="length: zigzag shards over 4 ranks need at least 8"):
        shard_chunks(7, 4, "zigzag")
    with pytest.raises(ValueError, match="rank: expected 0 <= rank < world_size = 2"):
        shard(torch.zeros(4, 2), 2, 2)
    with pytest.raises(RuntimeError, match="not initialised"):
        ring_attention(*(torch.zeros(1, 1, 2, 2) for _ in range(3)))


def test_ring_attention_equals_full_attention_and_its_gradients() -> None:
    """One start of four ranks: groups of 2, 3 and 4, lengths 13 (no count of ranks divides it) and 16."""
    merged = bench.merge(launch(bench.measure_all, 4, 256, 32))
    rows = merged["equal"]
    assert {(r["ranks"], r["length"], r["causal"], r["layout"]) for r in rows} == {
        (w, n, c, layout)
        for w in (2, 3, 4)
        for n in (13, 16)
        for c in (False, True)
        for layout in distributed.LAYOUTS
    }
    worst = max(r[name] for r in rows for name in ("out", "dq", "dk", "dv"))
    assert worst < 1e-5, bench.tables(merged)

    # Causal load balance: contiguous shards give rank r r + 1 tiles, zigzag shards 2W + 1 each.
    assert [b["contiguous"]["tiles"] for b in merged["balance"]] == [1, 2, 3, 4]
    assert [b["zigzag"]["tiles"] for b in merged["balance"]] == [9] * 4
    assert len({b["zigzag"]["scores"] for b in merged["balance"]}) == 1  # 256 positions: equal chunks
    contiguous = [b["contiguous"]["scores"] for b in merged["balance"]]
    assert (
        contiguous == sorted(contiguous) and contiguous[-1] > 1.5 * merged["balance"][0]["zigzag"]["scores"]
    )

    # Each rank sends its block to W - 1 others either way; the ring holds at most three blocks, the gather all W.
    block = 2 * 4 * 32 * 64 * 4  # k and v of one rank: (1, 4 heads, 32 positions, 64) float32
    for r in merged["scaling"]:
        w = r["ranks"]
        assert r["ring_sent"] == r["gather_sent"] == (w - 1) * block
        assert r["gather_held"] == w * block and r["ring_held"] == min(w, 3) * block


def _mismatched_heads() -> None:
    heads = 2 + dist.get_rank()  # rank 1 has three heads
    ring_attention(*(torch.randn(1, heads, 4, 8) for _ in range(3)))


def _wrong_world_size() -> None:
    ring_attention(*(torch.randn(1, 2, 4, 8) for _ in range(3)), world_size=3)


def _one_rank_fails() -> None:
    if dist.get_rank() == 1:
        raise KeyError("a bug on rank 1")
    ring_attention(*(torch.randn(1, 2, 4, 8) for _ in range(3)), timeout=3.0)


def _bad_rank_input() -> None:
    q = torch.randn(1, 2, 4, 8)
    k = q if dist.get_rank() == 0 else torch.randn(1, 2, 4, 6)  # rank 1: keys of another head dim
    ring_attention(q, k, q)


def test_mismatched_shards_raise_a_clear_error_on_every_rank() -> None:
    with pytest.raises(RuntimeError) as caught:
        launch(_mismatched_heads, 2, timeout=20.0)
    message = str(caught.value)
    assert "2 of 2 ranks failed" in message
    assert message.count("every rank must pass the same (B, H, D, Dv, dtype, is_causal, layout)") == 2
    with pytest.raises(RuntimeError) as caught:
        launch(_bad_rank_input, 2, timeout=20.0)
    assert "rank 1: ValueError: rank 1: k: expected" in str(caught.value)
    assert "rank 0: ValueError: ring_attention: rank 1's shard was rejected" in str(caught.value)


def test_a_world_size_the_group_does_not_have_fails_every_rank() -> None:
    with pytest.raises(RuntimeError) as caught:
        launch(_wrong_world_size, 2, timeout=20.0)
    assert str(caught.value).count("world_size: expected the group's size, 2, got 3") == 2


def test_one_failing_rank_ends_every_rank_without_a_hang() -> None:
    start = time.monotonic()
    with pytest.raises(RuntimeError) as caught:
        launch(_one_rank_fails, 2, timeout=3.0)
    assert time.monotonic() - start < 60
    message = str(caught.value)
    assert "2 of 2 ranks failed" in message and "rank 1: KeyError: 'a bug on rank 1'" in message
    assert "rank 0: RuntimeError" in message  # its all-gather ended: a timeout or a closed connection
