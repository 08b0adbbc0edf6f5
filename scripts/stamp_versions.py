"""Record in each notebook the versions its stored outputs were computed with.

    python scripts/stamp_versions.py NOTEBOOK ...

``make notebooks`` and ``make solutions`` run it on the notebooks they have just executed: it writes the running
Python's version and those of the packages the course depends on (:data:`attn_edu.env.PACKAGES`) into the
notebook's metadata, ``metadata.attn_edu.computed_with``, and touches nothing else. ``tests/test_lock.py`` checks
that every stored notebook carries them and that they are the versions of ``requirements/lock.txt``.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attn_edu.env import PACKAGES  # noqa: E402


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for _, dist, *_ in PACKAGES:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def stamp(path: Path, computed_with: dict[str, str]) -> bool:
    """Write ``computed_with`` into the notebook's metadata; ``True`` when the file changed."""
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    nb.setdefault("metadata", {}).setdefault("attn_edu", {})["computed_with"] = computed_with
    new = json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"  # as nbformat writes it
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def main(argv: list[str]) -> int:
    computed_with = versions()
    for name in argv:
        if stamp(Path(name), computed_with):
            print(f"stamped {name}: {', '.join(f'{k} {v}' for k, v in computed_with.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
