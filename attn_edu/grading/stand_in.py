"""A stand-in for ``triton`` in exercise notebooks where Triton cannot be installed (macOS, Windows).

The eight steps of notebook 12's Triton ladder write ``@triton.jit`` kernels. Without Triton their cells still run, so the notebook
runs to the end, and checking them reports the install hint instead of a ``NameError``. It lives with the
grading code, so the watch for calls into the package does not count it as the learner's shortcut.
"""

from __future__ import annotations

from types import ModuleType

from attn_edu.kernels import INSTALL_HINT, TritonNotInstalledError


class _Unlaunchable:
    """What ``triton.jit`` gives without Triton: defining the kernel works, launching it says what to install."""

    def __init__(self, fn: object) -> None:
        self.fn = fn

    def __getitem__(self, grid: object) -> object:
        def launch(*args: object, **kwargs: object) -> None:
            raise TritonNotInstalledError(INSTALL_HINT)

        return launch


def is_stand_in_kernel(obj: object) -> bool:
    """Whether ``obj`` is what :meth:`TritonStandIn.jit` made (a kernel defined where Triton is missing)."""
    return type(obj) is _Unlaunchable


class TritonStandIn(ModuleType):
    """Stands in for both ``triton`` and ``triton.language`` where Triton cannot be installed (macOS, Windows).

    An exercise notebook's kernel cells still run (``@triton.jit``, ``BLOCK: tl.constexpr``), so the
    notebook runs to the end; launching a kernel raises :class:`TritonNotInstalledError`, which its check
    reports with the install hint.

    Example:
        >>> triton = tl = TritonStandIn()
        >>> @triton.jit
        ... def kernel(x_ptr, BLOCK: tl.constexpr):
        ...     pass
        >>> triton.next_power_of_2(37)
        64
        >>> kernel[(1,)](None, BLOCK=64)
        Traceback (most recent call last):
        ...
        attn_edu.kernels.TritonNotInstalledError: Triton is not installed. ...
    """

    constexpr = object  # only ever read as an annotation

    def __init__(self) -> None:
        super().__init__("triton (not installed)")

    @staticmethod
    def jit(fn: object = None, **options: object) -> object:
        return _Unlaunchable(fn) if fn is not None else _Unlaunchable

    @staticmethod
    def next_power_of_2(n: int) -> int:
        return 1 << max(int(n) - 1, 0).bit_length()
