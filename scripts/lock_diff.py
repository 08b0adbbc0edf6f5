"""What ``make lock`` changed: ``python scripts/lock_diff.py OLD NEW`` prints every version that moved, was added
or was removed between two lock files (all markers counted, not only this machine's)."""

from __future__ import annotations

import re
import sys
from pathlib import Path


def pins(path: Path) -> dict[str, str]:
    found = {}
    if not path.is_file():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        requirement, _, marker = line.split("#", 1)[0].partition(";")
        name, sep, version = requirement.strip().partition("==")
        if sep:
            key = re.sub(r"[-_.]+", "-", name).lower() + (f" ; {marker.strip()}" if marker.strip() else "")
            found[key] = version.strip()
    return found


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
