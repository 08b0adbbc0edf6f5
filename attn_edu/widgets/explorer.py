"""The framework every explorer shares: controls, a pure view, and the figure shown in an Output.

Used by every notebook (00-14) through the explorer files of :mod:`attn_edu.widgets`. An
:class:`Explorer` holds the ipywidgets controls, calls its *view* function whenever a control moves,
keeps the numbers (``state``) and the figure the view returned, and shows the figure in an
:class:`ipywidgets.Output`. The view does the work with :mod:`attn_edu` and :mod:`attn_edu.viz`; the
explorer only wires it to the controls.

Shared by the explorer files: :data:`View` (the view's type), :func:`as_float_tensor` (argument
conversion) and :data:`WIDE_LABELS` (a control style).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from IPython import get_ipython
from matplotlib.figure import Figure

View = Callable[..., tuple[dict[str, Any], Figure]]
"""A pure view: keyword arguments named like the controls in, ``(state, figure)`` out."""

WIDE_LABELS = {"description_width": "initial"}
"""``style=`` for a control whose description is too long for the default label width."""


class Explorer:
    """Controls + a view function + the latest figure and numbers.

    Attributes:
        controls: the ipywidgets, by name; each name is a keyword argument of the view.
        output: the :class:`ipywidgets.Output` the figure is drawn into.
        state: the numbers behind the current figure (what the view computed), for tests and asserts.
        figure: the current :class:`matplotlib.figure.Figure` (already closed in pyplot, still readable).
        widget: the assembled box (title, controls, output) that Jupyter displays.

    ``sync``, if given, runs before each redraw to keep dependent controls consistent (e.g. a slider's
    maximum that follows another slider); control changes it makes do not trigger extra redraws.

    Example:
        >>> def view(*, n: int) -> tuple[dict, Figure]:
        ...     figure, ax = plt.subplots()
        ...     ax.plot(range(n))
        ...     return {"n": n}, figure
        >>> ex = Explorer({"n": widgets.IntSlider(value=2, min=1, max=9)}, view)
        >>> ex.set(n=5)
        >>> ex.state, plt.fignum_exists(ex.figure.number)   # closed in pyplot, still readable
        ({'n': 5}, False)
    """

    def __init__(
        self,
        controls: dict[str, widgets.ValueWidget],
        view: View,
        *,
        title: str = "",
        sync: Callable[[dict[str, widgets.ValueWidget]], None] | None = None,
    ) -> None:
        self.controls = controls
        self.output = widgets.Output()
        self.state: dict[str, Any] = {}
        self.figure: Figure | None = None
        self._view = view
        self._sync = sync
        self._busy = False
        header = [widgets.HTML(f"<b>{title}</b>")] if title else []
        row = widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))
        self.widget = widgets.VBox([*header, row, self.output])
        for control in controls.values():
            control.observe(self._on_change, names="value")
        self.update()

    def values(self) -> dict[str, Any]:
        """The current value of every control, by name."""
        return {name: control.value for name, control in self.controls.items()}

    @contextmanager
    def _quiet(self) -> Iterator[None]:
        # Control changes made inside this block do not redraw (update() redraws once at the end).
        busy, self._busy = self._busy, True
        try:
            yield
        finally:
            self._busy = busy

    def _on_change(self, change: dict[str, Any]) -> None:
        if not self._busy:
            self.update()

    def set(self, **values: Any) -> None:
        """Move several controls at once and redraw once: ``explorer.set(T=4, S=7)``."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(
                f"values: unknown controls {sorted(unknown)}; expected some of {list(self.controls)}"
            )
        with self._quiet():
            # Two passes: a value set before the control it depends on (a length before the number
            # of keys) may be clamped by bounds that ``sync`` only widens afterwards.
            for _ in range(2):
                for name, value in values.items():
                    self.controls[name].value = value
                if self._sync is not None:
                    self._sync(self.controls)
        for name, value in values.items():
            if self.controls[name].value != value:
                raise ValueError(
                    f"{name}: {value!r} is outside the control's range, got {self.controls[name].value!r}"
                )
        self.update()

    def update(self) -> None:
        """Recompute the view from the controls, replace the figure and show it in ``output``."""
        with self._quiet():
            if self._sync is not None:
                self._sync(self.controls)
            state, figure = self._view(**self.values())
        old, self.figure, self.state = self.figure, figure, state
        if old is not None:
            plt.close(old)
        if get_ipython() is not None:  # without a kernel there is no Output to draw into
            # Replace the Output's contents through its synced state rather than `with output:
            # display(...)`: the state update reaches every front end, never leaks into the cell's own
            # outputs, and avoids nbclient stalling on output-widget messages (jupyter/nbclient#312).
            self.output.outputs = ()
            self.output.append_display_data(figure)
        plt.close(figure)  # shown once in the Output; no second copy at the end of the cell

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return f"Explorer(controls={list(self.controls)})"


def as_float_tensor(name: str, x: Any) -> torch.Tensor:
    """A detached float CPU tensor from a tensor, array or list; ``ValueError`` naming ``name`` otherwise.

    Explorers take what a learner has at hand (a list of scores, a NumPy array, a model's tensor) and
    convert it once, here. Integers become float32; floating tensors keep their dtype.

    Shapes:
        any shape in, the same shape out.

    Example:
        >>> as_float_tensor("scores", [1, 2, 3])
        tensor([1., 2., 3.])
    """
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu()
    else:
        try:
            t = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(
                f"{name}: expected a tensor or a list of numbers, got {type(x).__name__}"
            ) from None
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name}: expected real numbers, got dtype {t.dtype}")
    return t if t.is_floating_point() else t.float()
