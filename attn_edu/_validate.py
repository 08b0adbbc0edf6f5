"""Input checks shared by every module, so bad input fails early with a message a learner can act on.

Shapes are written with the legend letters of :mod:`attn_edu` (``B T S H D C V``), separated by spaces;
``...`` stands for any number of leading dimensions and a digit for a fixed size::

    sizes = check_shape("q", q, "B H T D")          # -> {"B": 2, "H": 4, "T": 5, "D": 8}
    check_shape("k", k, "B H S D", D=sizes["D"])    # k must share q's head dim
"""

from __future__ import annotations

import math

import torch


def _format_spec(spec: list[str]) -> str:
    return "(" + ", ".join(spec) + ")"


def check_tensor(name: str, x: object) -> torch.Tensor:
    """Raise ``TypeError`` unless ``x`` is a tensor (a list or array is the usual slip)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    return x


def check_floating(name: str, x: torch.Tensor) -> torch.Tensor:
    """Raise ``ValueError`` unless ``x`` holds floating-point numbers."""
    check_tensor(name, x)
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")
    return x


def check_shape(name: str, x: torch.Tensor, spec: str, **known: int) -> dict[str, int]:
    """Check ``x.shape`` against ``spec`` (e.g. ``"B T C"`` or ``"... T D"``) and return the sizes.

    Letters that appear twice in ``spec`` must have equal sizes; sizes passed in ``known``
    must match. The error names the argument, the expected shape with the known sizes filled in,
    and the shape that arrived.
    """
    check_tensor(name, x)
    tokens = spec.split()
    leading = bool(tokens) and tokens[0] == "..."
    named = tokens[1:] if leading else tokens
    shape = tuple(x.shape)

    def fail(reason: str) -> ValueError:
        filled = ", ".join(f"{k}={v}" for k, v in known.items())
        expected = _format_spec(tokens) + (f" with {filled}" if filled else "")
        return ValueError(f"{name}: expected shape {expected}, got {shape}{reason}")

    if (leading and len(shape) < len(named)) or (not leading and len(shape) != len(named)):
        wanted_ndim = f"at least {len(named)}" if leading else str(len(named))
        raise fail(f" ({wanted_ndim} dims needed, got {len(shape)})")

    sizes: dict[str, int] = {}
    for letter, size in zip(named, shape[len(shape) - len(named) :]):
        if letter.isdigit():
            if size != int(letter):
                raise fail(f" (a dimension of size {letter} was expected, got {size})")
            continue
        want = known.get(letter, sizes.get(letter))
        if want is not None and size != want:
            raise fail(f" ({letter}={size} does not match {letter}={want})")
        sizes[letter] = size
    return sizes


def check_same_shape(name: str, x: torch.Tensor, like_name: str, like: torch.Tensor) -> None:
    """Raise ``ValueError`` unless ``x`` has exactly the shape of ``like`` (one entry per element of it)."""
    check_tensor(name, x)
    if x.shape != like.shape:
        raise ValueError(
            f"{name}: expected the shape of {like_name}, {tuple(like.shape)}, got {tuple(x.shape)}"
        )


def check_same_dtype(**tensors: torch.Tensor) -> None:
    """Raise ``ValueError`` when the given tensors do not share one dtype."""
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{n}={d}" for n, d in dtypes.items())
        raise ValueError(f"expected one dtype for {', '.join(dtypes)}, got {listed}")


def broadcast_shapes(*shapes: tuple[int, ...] | torch.Size) -> tuple[int, ...]:
    """The shape that ``shapes`` broadcast to, by NumPy's rule; ``RuntimeError`` when they do not.

    The same answer as :func:`torch.broadcast_shapes`, which in this torch imports sympy on its first call
    (over two seconds); the checks here run before every attention call.

    Example:
        >>> broadcast_shapes((2, 1, 5), (3, 1), ())
        (2, 3, 5)
    """
    out: list[int] = []
    for shape in shapes:
        shape = tuple(shape)
        padded = [1] * (len(shape) - len(out)) + out
        out = []
        for a, b in zip(padded, [1] * (len(padded) - len(shape)) + list(shape)):
            if a != b and 1 not in (a, b):
                raise RuntimeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
            out.append(b if a == 1 else a)
    return tuple(out)


def check_broadcast(name: str, shape: tuple[int, ...], target: tuple[int, ...], target_spec: str) -> None:
    """Raise ``ValueError`` unless ``shape`` broadcasts to ``target`` without growing it."""
    try:
        out = broadcast_shapes(shape, target)
    except RuntimeError:
        out = None
    if out != tuple(target):
        raise ValueError(
            f"{name}: expected a shape that broadcasts to {target_spec} = {tuple(target)}, got {tuple(shape)}"
        )


def check_mask(
    name: str, mask: object, scores_shape: tuple[int, ...] | None = None, spec: str = "(..., T, S)"
) -> torch.Tensor:
    """Raise unless ``mask`` is a bool tensor (``True`` = may attend) that broadcasts to ``scores_shape``.

    The one wording for every mask argument of the package: a float mask (additive ``0 / -inf``, or 0/1)
    and :class:`torch.nn.MultiheadAttention`'s opposite polarity are the usual slips, so the message says
    how to convert both.

    Example:
        >>> check_mask("mask", torch.ones(3, 1, dtype=torch.int64))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: mask: expected a bool mask (True = may attend), got dtype torch.int64; ...
    """
    check_tensor(name, mask)
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{name}: expected a bool mask (True = may attend), got dtype {mask.dtype}; build it with "
            "attn_edu.masks, or convert: a 0/1 mask with `mask.bool()`, an additive 0/-inf mask with "
            "`mask == 0`, a torch.nn.MultiheadAttention mask (True = ignore) with `~mask`"
        )
    if scores_shape is not None:
        check_broadcast(name, tuple(mask.shape), tuple(scores_shape), spec)
    return mask


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None = None) -> dict[str, object]:
    """Check attention inputs ``q (..., T, D)``, ``k (..., S, D)`` and ``v (..., S, Dv)``; return their sizes.

    All floating point, one dtype, ``q`` and ``k`` sharing ``D``, ``k`` and ``v`` sharing ``S``, and
    leading (batch, head) dims that broadcast. Returns ``{"batch": (...), "T", "S", "D", "Dv"}``
    (``Dv`` only when ``v`` is given).

    Example:
        >>> sizes = check_qkv(torch.ones(2, 5, 8), torch.ones(2, 7, 8), torch.ones(1, 7, 3))
        >>> sizes["batch"], sizes["T"], sizes["S"], sizes["Dv"]
        ((2,), 5, 7, 3)
    """
    named = {"q": q, "k": k} if v is None else {"q": q, "k": k, "v": v}
    for name, x in named.items():
        check_floating(name, x)
    check_same_dtype(**named)
    sizes: dict[str, object] = dict(check_shape("q", q, "... T D"))
    sizes["S"] = check_shape("k", k, "... S D", D=sizes["D"])["S"]
    if v is not None:
        sizes["Dv"] = check_shape("v", v, "... S Dv", S=sizes["S"])["Dv"]
    try:
        sizes["batch"] = broadcast_shapes(*(x.shape[:-2] for x in named.values()))
    except RuntimeError:
        shapes = ", ".join(f"{n} {tuple(x.shape)}" for n, x in named.items())
        raise ValueError(
            f"{', '.join(named)}: expected leading dims (..., e.g. B, H) that broadcast, got {shapes}"
        ) from None
    return sizes


def check_sinks(sinks: object, batch: tuple[int, ...]) -> torch.Tensor:
    """Check learned sink logits, one per head, for attention whose leading dims are ``batch`` = ``(..., H)``.

    Returns them shaped ``(H, 1)``, ready to broadcast against a row statistic ``(..., H, T)``.

    Example:
        >>> check_sinks(torch.zeros(4), (2, 4)).shape
        torch.Size([4, 1])
    """
    sinks = check_floating("sinks", check_tensor("sinks", sinks))
    if not batch:
        raise ValueError(
            "sinks: one logit per head needs q of shape (..., H, T, D) with a head dim; q has no leading dims"
        )
    if sinks.ndim != 1 or sinks.shape[0] != batch[-1]:
        raise ValueError(
            f"sinks: expected shape (H,) = ({batch[-1]},), one logit per head, got {tuple(sinks.shape)}"
        )
    return sinks[:, None]


def check_positive_int(name: str, value: object) -> int:
    """Raise ``ValueError`` unless ``value`` is an int > 0 (``bool`` is refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value


def check_rope_dim(name: str, dim: object, *, minimum: int = 2) -> int:
    """Raise ``ValueError`` unless ``dim`` (a head size that RoPE turns) is an even int >= ``minimum``."""
    check_positive_int(name, dim)
    if dim % 2:
        raise ValueError(
            f"{name}: RoPE rotates pairs of coordinates, so the head dim D must be even, got D={dim}"
        )
    if dim < minimum:
        raise ValueError(f"{name}: expected D >= {minimum}, got D={dim}")
    return dim


def check_frequency_base(base: object) -> float:
    """The ``base`` of sinusoidal or rotary frequencies, ``base^(-2i/D)``: a finite number > 1."""
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"base: expected a finite number > 1 (10000.0 in the papers), got {base!r}")
    return float(base)


def check_head_dim(embed_dim: int, num_heads: int, head_dim: int | None) -> int:
    """The head size ``D``: ``head_dim`` if given (a positive int), else ``embed_dim / num_heads``,
    which must then divide evenly."""
    if head_dim is not None:
        return check_positive_int("head_dim", head_dim)
    if embed_dim % num_heads:
        raise ValueError(f"num_heads: must divide embed_dim={embed_dim} (or give head_dim=), got {num_heads}")
    return embed_dim // num_heads


def check_scale(scale: float | None, head_dim: int) -> float:
    """Return the softmax scale: ``scale`` if given (finite, > 0), else ``1/sqrt(head_dim)``."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, torch.Tensor):
        scale = float(scale)
    if not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: expected a finite number > 0 (default 1/sqrt(D)), got {scale!r}")
    return float(scale)


def check_token_ids(name: str, ids: object, vocab_size: int) -> dict[str, int]:
    """Check a batch of token ids: an integer tensor ``(B, T)`` with values in ``0 .. vocab_size - 1``.

    An id outside the vocabulary would otherwise fail deep inside ``nn.Embedding`` with an index error.
    Returns ``{"B": ..., "T": ...}``.
    """
    check_tensor(name, ids)
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"{name}: expected integer token ids (torch.long), got dtype {ids.dtype}")
    sizes = check_shape(name, ids, "B T")
    if ids.numel() and ids.device.type != "meta":
        lowest, highest = int(ids.min()), int(ids.max())
        if lowest < 0 or highest >= vocab_size:
            raise ValueError(
                f"{name}: expected ids in 0 .. {vocab_size - 1} (V={vocab_size}), got values {lowest} .. {highest}"
            )
    return sizes
