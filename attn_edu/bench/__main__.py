"""Dispatch ``python -m attn_edu.bench NAME [options]`` to ``attn_edu.bench.NAME.main``."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import attn_edu.bench as _package


def available() -> list[str]:
    """Names of the benchmarks in this package."""
    return sorted(m.name for m in pkgutil.iter_modules(_package.__path__) if not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    names = available()
    if not argv or argv[0] in ("-h", "--help", "--list"):
        print("usage: python -m attn_edu.bench NAME [options]\nbenchmarks: " + ", ".join(names))
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in names:
        print(f"unknown benchmark {name!r}; choose one of: {', '.join(names)}", file=sys.stderr)
        return 2
    return int(importlib.import_module(f"attn_edu.bench.{name}").main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
