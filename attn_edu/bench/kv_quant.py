"""The quantised KV cache measured: the text GPT reading held-out text one token at a time through a float cache and
through :class:`attn_edu.kv_quant.QuantizedKVCache` at 8 and 4 bits, its loss and its bytes.

``python -m attn_edu.bench kv_quant [--windows 32] [--write]`` prints one table; ``--write`` stores it in
``attn_edu/weights/kv_quant.json``, which notebook 10 reads.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import torch

RECORD = "kv_quant"  # attn_edu/weights/kv_quant.json
CACHES = (("float32", None, None), ("int8", 8, 32), ("int4", 4, 32), ("int4", 4, 16))  # (name, bits, group)


def measure(
    model: Any, windows: torch.Tensor, caches: Sequence[tuple[str, int | None, int | None]] = CACHES
) -> list[dict[str, Any]]:
    """For each cache: the decoding loss (nats per character) over ``windows`` ``(B, T)``, read in one batch, and
    the bytes the cache holds at the end (float residual included)."""
    from attn_edu.kv_cache import KVCache
    from attn_edu.kv_quant import QuantizedKVCache, decode_loss

    rows = []
    for name, bits, group in caches:
        layers = model.config.num_layers
        cache = KVCache(layers) if bits is None else QuantizedKVCache(layers, bits=bits, group_size=group)
        loss = decode_loss(model, windows, cache)
        rows.append({"cache": name, "bits": bits, "group_size": group, "loss": loss,
                     "kib": cache.nbytes() / 1024, "tokens": cache.seq_len, "windows": windows.shape[0]})  # fmt: skip
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a text table, bytes also relative to the float cache's."""
    base = rows[0]["kib"]
    lines = [f"{'cache':<8}{'group':>6}{'loss (nats/char)':>18}{'KiB':>9}{'of float':>10}"]
    for r in rows:
        group = "-" if r["group_size"] is None else str(r["group_size"])
        lines.append(f"{r['cache']:<8}{group:>6}{r['loss']:>18.4f}{r['kib']:>9,.0f}{r['kib'] / base:>10.0%}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from attn_edu.experiments import shipped
    from attn_edu.experiments.text_gpt import load_text_gpt

    parser = argparse.ArgumentParser(
        prog="python -m attn_edu.bench kv_quant", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--windows", type=int, default=32, help="held-out windows of 128 characters")
    parser.add_argument(
        "--write", action="store_true", help=f"store the record in attn_edu/weights/{RECORD}.json"
    )
    args = parser.parse_args(argv)
    if args.windows < 1:
        parser.error("--windows must be positive")
    from attn_edu.corpus import held_out_windows

    model, tokenizer = load_text_gpt()
    rows = measure(model, held_out_windows(tokenizer, args.windows, 128))
    print(table(rows))
    if args.write:
        command = "python -m attn_edu.bench kv_quant " + " ".join(argv or [])
        print("wrote", shipped.save_record(RECORD, {"command": command.strip(), "rows": rows}))
    return 0
