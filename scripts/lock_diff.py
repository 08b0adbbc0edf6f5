"""What ``make lock`` changed: ``python scripts/lock_diff.py OLD NEW`` prints every version that moved, was added
or was removed between two lock files (all markers counted, not only this machine's)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attn_edu.env import lock_entries  # noqa: E402


def pins(path: Path) -> dict[str, str]:
    """``{"name ; marker": version}`` for every line of the lock, each platform's line apart."""
    return {
        name + (f" ; {marker}" if marker else ""): version for name, version, marker in lock_entries(path)
    }


def main(argv: list[str]) -> int:
    old, new = pins(Path(argv[0])), pins(Path(argv[1]))
    moved = [f"  {k}: {old[k]} -> {new[k]}" for k in sorted(old.keys() & new.keys()) if old[k] != new[k]]
    added = [f"  + {k}=={new[k]}" for k in sorted(new.keys() - old.keys())]
    removed = [f"  - {k}=={old[k]}" for k in sorted(old.keys() - new.keys())]
    if not (moved or added or removed):
        print("the lock did not change")
    for title, lines in (("changed", moved), ("added", added), ("removed", removed)):
        if lines:
            print(f"{len(lines)} {title}:", *lines, sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
