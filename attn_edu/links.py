"""Where the course lives online, held in one place: the repository's public URL and the links made from it.

The README's "Open in Colab" and "Launch Binder" badges, the website's buttons (``make site``) and the
install line in every notebook's first cell (``%pip install -c <lock> "attn-edu[...] @ git+<URL>"``, run on Colab
only, with the repository's ``requirements/lock.txt`` as constraints)
all come from :data:`REPOSITORY`, and so does the README's Gradescope ``setup.sh``; ``tests/test_links.py``
fails when one of them does not. A fork sets :data:`REPOSITORY` to its own URL and runs ``python -m
attn_edu.links --write``, which rewrites those links in the README and the notebooks' install lines (nothing
else in them), then ``make exercises``.

Colab opens a notebook straight from GitHub; Binder builds the repository's ``environment.yml`` (and
``postBuild``) first and opens the notebook in JupyterLab (``labpath``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from urllib.parse import quote

REPOSITORY = "https://github.com/attn-edu/attn-edu"  # the one setting
BRANCH = "main"  # the branch the badges open

COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"
# The package installed from the repository (a notebook's first cell, the README's Gradescope setup.sh):
# "attn-edu[interop,triton] @ git+<URL>" (or without extras), whatever URL it holds today.
INSTALL_SPEC = re.compile(r'(attn-edu(?:\[[\w,]*\])? @ git\+)(https://[^"\s]+)')
# The lock file (requirements/lock.txt) as raw text on GitHub, whatever repository and branch the URL names today:
# the install lines pass it to pip as constraints (-c), so Colab and Gradescope install the tested versions.
LOCK_PATH = "requirements/lock.txt"
LOCK_URL = re.compile(r"https://raw\.githubusercontent\.com/[\w.-]+/[\w.-]+/[\w.-]+/requirements/lock\.txt")
# A README badge pair for one notebook, whatever URLs it holds today.
BADGE_PAIR = re.compile(
    r"\[!\[Colab\]\([^)]*\)\]\([^)]*\) \[!\[Binder\]\([^)]*\)\]\([^)]*?labpath=([^)&]+)\)"
)


def _owner_repo() -> str:
    """``"attn-edu/attn-edu"``: the repository's path on GitHub."""
    found = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)", REPOSITORY)
    if found is None:
        raise ValueError(f"REPOSITORY: expected https://github.com/OWNER/NAME, got {REPOSITORY!r}")
    return found.group(1)


def colab_url(path: str) -> str:
    """The Colab link that opens ``path`` (a notebook, relative to the repository root) from GitHub.

    Example:
        >>> colab_url("course/04_masks.ipynb")
        'https://colab.research.google.com/github/attn-edu/attn-edu/blob/main/course/04_masks.ipynb'
    """
    return f"https://colab.research.google.com/github/{_owner_repo()}/blob/{BRANCH}/{path}"


def binder_url(path: str) -> str:
    """The Binder link that builds the repository and opens ``path`` in JupyterLab.

    Example:
        >>> binder_url("course/04_masks.ipynb")
        'https://mybinder.org/v2/gh/attn-edu/attn-edu/main?labpath=course%2F04_masks.ipynb'
    """
    return f"https://mybinder.org/v2/gh/{_owner_repo()}/{BRANCH}?labpath={quote(path, safe='')}"


def source_url(path: str) -> str:
    """The file on GitHub. Example: ``source_url("README.md")`` ends in ``/blob/main/README.md``."""
    return f"{REPOSITORY}/blob/{BRANCH}/{path}"


def lock_url() -> str:
    """The lock file's raw text on GitHub, which pip reads as constraints (``pip install -c URL ...``).

    Example:
        >>> lock_url()
        'https://raw.githubusercontent.com/attn-edu/attn-edu/main/requirements/lock.txt'
    """
    return f"https://raw.githubusercontent.com/{_owner_repo()}/{BRANCH}/{LOCK_PATH}"


def badges(path: str) -> str:
    """The README's two badges (Markdown) for the notebook at ``path``."""
    return f"[![Colab]({COLAB_BADGE})]({colab_url(path)}) [![Binder]({BINDER_BADGE})]({binder_url(path)})"


def install_line(line: str) -> str:
    """``line`` with every ``attn-edu[...] @ git+URL`` installing from :data:`REPOSITORY`, and every lock URL
    reading :data:`REPOSITORY`'s lock.

    Example:
        >>> install_line('%pip install -q "attn-edu[interop] @ git+https://github.com/someone/fork"')
        '%pip install -q "attn-edu[interop] @ git+https://github.com/attn-edu/attn-edu"'
    """
    return LOCK_URL.sub(lock_url(), INSTALL_SPEC.sub(lambda m: m.group(1) + REPOSITORY, line))


def readme_with_links(text: str) -> str:
    """The README with its badges (each for the notebook of its labpath) and install lines made from
    :data:`REPOSITORY`."""
    return install_line(BADGE_PAIR.sub(lambda m: badges(m.group(1).replace("%2F", "/")), text))


def _notebook_with_install_line(text: str) -> str:
    """A notebook's JSON text with its first code cell's install URL set; the same text when it already is."""
    nb = json.loads(text)
    first = next(cell for cell in nb["cells"] if cell["cell_type"] == "code")
    lines = first["source"] if isinstance(first["source"], list) else first["source"].splitlines(True)
    fixed = [install_line(line) for line in lines]
    if fixed == lines:
        return text
    first["source"] = fixed
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"  # as nbformat writes it


def write(root: Path) -> list[Path]:
    """Rewrite the README's links and the notebooks' install lines (``course/``, ``solutions/``); return what
    changed."""
    changed = []
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    if readme_with_links(text) != text:
        readme.write_text(readme_with_links(text), encoding="utf-8")
        changed.append(readme)
    for path in sorted([*root.glob("course/*.ipynb"), *root.glob("solutions/*.ipynb")]):
        text = path.read_text(encoding="utf-8")
        fixed = _notebook_with_install_line(text)
        if fixed != text:
            path.write_text(fixed, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attn_edu.links", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the README's links and install lines")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: here)")
    args = parser.parse_args(argv)
    print(f"REPOSITORY = {REPOSITORY}")
    if args.write:
        for path in write(args.root):
            print(f"rewritten: {path}")
        print("now run `make exercises` (the exercise notebooks copy the solutions' first cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
