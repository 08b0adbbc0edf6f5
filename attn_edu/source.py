"""Show the library's source inside a notebook, so a derivation can be read beside the reference."""

from __future__ import annotations

import inspect
from typing import Any


def source_text(obj: Any) -> str:
    """The source code of a function, class or module, as a string.

    Example:
        >>> from attn_edu.masks import causal_mask
        >>> source_text(causal_mask).splitlines()[0]
        'def causal_mask(T: int, S: int | None = None, *, device: torch.device | str | None = None) -> torch.Tensor:'
    """
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError) as err:
        raise ValueError(
            f"obj: expected a function, class or module defined in Python source, got {obj!r}"
        ) from err


def show_source(obj: Any) -> Any:
    """Display ``obj``'s source with syntax highlighting in Jupyter (plain text elsewhere).

    Returns an IPython ``Code`` object when IPython is available, else the source string.
    """
    text = source_text(obj)
    try:
        from IPython.display import Code
    except ImportError:  # plain Python: just the text
        return text
    return Code(text, language="python")
