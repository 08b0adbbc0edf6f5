"""Exit 0 when the browser suite already compared every notebook of FOLDER, as it is now, with the stored outputs.

    python scripts/compared_in_browser.py FOLDER [NAME=VALUE ...]

The NAME=VALUE pairs are the CPU settings the comparison must have run with (the Makefile's OTHER_CPU);
none means this CPU's own path. ``make nbval`` runs nbval's pass over FOLDER, as another CPU computes, only
when this exits 1 for OTHER_CPU's settings, and prints the reasons this prints (``tests/ui/stored_outputs.py``
keeps the record).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "ui"))

from stored_outputs import compared_everywhere  # noqa: E402


def main(argv: list[str]) -> int:
    if not argv or any("=" not in pair for pair in argv[1:]):
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    settings = dict(pair.split("=", 1) for pair in argv[1:])
    reasons = compared_everywhere(Path(argv[0]), settings)
    for reason in reasons:
        print(f"  {reason}")
    return 1 if reasons else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
