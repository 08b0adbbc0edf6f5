"""attn_edu.source: reading definitions from a file's text agrees with Python's own view of them."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from attn_edu import flash, masks, source

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("obj", [masks.causal_mask, flash.tiled_attention_forward, flash._key_stop])
def test_definition_read_as_text_equals_inspect(obj):
    name = f"{obj.__module__}.{obj.__name__}"
    assert source.source_text(name) == inspect.getsource(obj).rstrip("\n")
    assert source.definition_source(obj.__name__, file=Path(inspect.getfile(obj))) == source.source_text(name)


def test_excerpt_is_a_piece_of_the_definition_in_order():
    piece = source.excerpt(
        "tiled_attention_forward", "m_new = torch.maximum", "m_i = m_new", file="attn_edu.flash"
    )
    header, *lines = piece.splitlines()
    assert header.startswith("# flash.py, tiled_attention_forward, lines ")
    assert lines[0].startswith("m_new = torch.maximum") and lines[-1].startswith("m_i = m_new")
    whole = [line.strip() for line in inspect.getsource(flash.tiled_attention_forward).splitlines()]
    start = whole.index(lines[0].strip())
    assert [line.strip() for line in lines] == whole[start : start + len(lines)]
    with pytest.raises(ValueError, match="no line with"):
        source.excerpt("tiled_attention_forward", "this text is not there", file="attn_edu.flash")
    with pytest.raises(ValueError, match="no top-level definition"):
        source.definition_source("not_defined_here", file="attn_edu.flash")


def test_calls_and_constants_match_the_module():
    assert "torch.exp" in source.calls("tiled_attention_forward", file="attn_edu.flash")
    assert "_tile_allowed" in source.calls("tiled_attention_forward", file="attn_edu.flash")
    import attn_edu.experiments.induction_heads as module

    constants = source.module_constants("attn_edu.experiments.induction_heads")
    assert {"VOCAB", "PERIOD", "STEPS"} <= constants.keys()
    assert all(getattr(module, name) == value for name, value in constants.items())


def test_load_function_behaves_like_the_imported_function():
    loaded = source.load_function("_key_stop", file="attn_edu.flash")
    for T, S, q_end, causal in [(8, 8, 4, True), (3, 9, 2, True), (9, 3, 2, True), (5, 5, 5, False)]:
        assert loaded(q_end, T, S, causal) == flash._key_stop(q_end, T, S, causal)


def test_kernel_source_is_read_without_importing_triton():
    code = (
        "import sys; from attn_edu.source import source_text; "
        "text = source_text('attn_edu.kernels.triton_flash._flash_forward_kernel'); "
        "assert text.startswith('@triton.jit'), text[:40]; "
        "assert 'triton' not in sys.modules and 'attn_edu.kernels.triton_flash' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_bad_names_say_what_was_expected():
    with pytest.raises(ValueError, match="module.definition"):
        source.source_text("attn_edu")
    with pytest.raises(ValueError, match="dotted name of a module"):
        source.module_file("attn_edu.no_such_module")


def test_show_source_between_two_markers_shows_those_lines_of_the_function():
    from attn_edu.flash import tiled_attention_forward

    shown = source.show_source(tiled_attention_forward, start="m_new = torch.maximum", stop="m_i = m_new")
    text = getattr(shown, "data", shown)
    lines = text.splitlines()
    assert lines[0].startswith("m_new = torch.maximum") and lines[-1].startswith("m_i = m_new")
    assert 3 <= len(lines) < 15 and all(line in source.source_text(tiled_attention_forward) for line in lines)
    with pytest.raises(ValueError, match="stop"):
        source.lines_between("a\nb\n", "a", "c")
