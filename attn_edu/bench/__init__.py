"""Benchmarks that print figures (never timed unit tests).

Run ``python -m attn_edu.bench NAME [options]``; ``python -m attn_edu.bench --list`` shows the names.
Each benchmark is a module ``attn_edu.bench.NAME`` with a ``main(argv) -> int`` function.
"""
