"""One setting, ``attn_edu.links.REPOSITORY``, makes every link to the course's repository: the README's Colab
and Binder badges, the Gradescope setup it shows, every notebook's Colab install line (and the website's
buttons: ``tests/ui/test_site_in_browser.py``). Changing it and running ``--write`` moves them all."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attn_edu import links

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(
    [*ROOT.glob("course/*.ipynb"), *ROOT.glob("solutions/*.ipynb"), *ROOT.glob("exercises/*.ipynb")]
)
# Anything that points at a copy of this repository: on GitHub, on Colab, on Binder.
REPO_URL = re.compile(
    r"https://(?:github\.com/(?P<gh>[\w.-]+/attn-edu[\w.-]*)"
    r"|colab\.research\.google\.com/github/(?P<colab>[\w.-]+/[\w.-]+)"
    r"|mybinder\.org/v2/gh/(?P<binder>[\w.-]+/[\w.-]+))"
)


def _repositories(text: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in REPO_URL.finditer(text)}


def test_the_setting_is_a_github_repository() -> None:
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", links.REPOSITORY)
    owner_repo = links.REPOSITORY.removeprefix("https://github.com/")
    assert links.colab_url("course/04_masks.ipynb").endswith(
        f"/github/{owner_repo}/blob/main/course/04_masks.ipynb"
    )
    assert links.binder_url("course/04_masks.ipynb").endswith(
        f"/gh/{owner_repo}/main?labpath=course%2F04_masks.ipynb"
    )


def test_every_readme_link_to_the_repository_uses_the_setting() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _repositories(readme) == {links.REPOSITORY.removeprefix("https://github.com/")}
    assert links.readme_with_links(readme) == readme, "run `python -m attn_edu.links --write`"
    for notebook in sorted((ROOT / "course").glob("*.ipynb")):  # every course notebook has its two badges
        assert links.badges(f"course/{notebook.name}") in readme, notebook.name
    assert f'"attn-edu[interop,triton] @ git+{links.REPOSITORY}"' in readme  # the Gradescope setup.sh


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[f"{p.parent.name}/{p.name}" for p in NOTEBOOKS])
def test_every_notebook_installs_from_the_setting_on_colab(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    first = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    assert "google.colab" in first
    found = links.INSTALL_SPEC.search(first)
    assert found and found.group(2) == links.REPOSITORY, first
    text = "\n".join("".join(cell["source"]) for cell in nb["cells"])
    assert _repositories(text) <= {links.REPOSITORY.removeprefix("https://github.com/")}, path.name


def test_write_moves_every_link_to_a_new_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork: the README's badges and the notebooks' install lines follow; nothing else in them changes."""
    (tmp_path / "course").mkdir()
    (tmp_path / "solutions").mkdir()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (tmp_path / "README.md").write_text(readme, encoding="utf-8")
    for name in ("course/04_masks.ipynb", "solutions/04_masks.ipynb"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    upstream = links.REPOSITORY
    monkeypatch.setattr(links, "REPOSITORY", "https://github.com/someone/attn-edu-fork")
    changed = links.write(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in changed) == [
        "README.md",
        "course/04_masks.ipynb",
        "solutions/04_masks.ipynb",
    ]
    new_readme = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert (
        "colab.research.google.com/github/someone/attn-edu-fork/blob/main/course/04_masks.ipynb" in new_readme
    )
    assert "mybinder.org/v2/gh/someone/attn-edu-fork/main?labpath=course%2F04_masks.ipynb" in new_readme
    badges = 2 * len(list((ROOT / "course").glob("*.ipynb")))
    assert new_readme.count("someone/attn-edu-fork") == badges + 2  # and the Gradescope setup.sh's two
    assert _repositories(new_readme) == {"someone/attn-edu-fork"}
    for name in ("course/04_masks.ipynb", "solutions/04_masks.ipynb"):  # byte for byte, but the URL
        before, after = ((root / name).read_text(encoding="utf-8") for root in (ROOT, tmp_path))
        fork_lock = "https://raw.githubusercontent.com/someone/attn-edu-fork/main/requirements/lock.txt"
        moved = before.replace(f"git+{upstream}", "git+https://github.com/someone/attn-edu-fork")
        assert after == links.LOCK_URL.sub(fork_lock, moved)
        assert after != before
    assert links.write(tmp_path) == []  # already moved
