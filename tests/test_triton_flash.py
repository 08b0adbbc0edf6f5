"""The Triton FlashAttention kernels against torch SDPA and the course reference.

Where the kernels run. On a CUDA machine the ``triton``-marked tests run compiled, in this process.
Without a GPU they need Triton's interpreter, and ``TRITON_INTERPRET=1`` must be set before the
*first* ``import triton`` of a process: Triton defines its own library functions (``tl.zeros``,
``tl.max``...) at that moment, so the switch is process-wide and cannot be undone. Setting it here
would leak into every test file that imports Triton later. So this process never sets it: one test,
:func:`test_kernels_in_the_interpreter`, re-runs this file's ``triton`` tests in a child process
started with ``TRITON_INTERPRET=1``, and their in-process copies are skipped. To run them directly:
``TRITON_INTERPRET=1 pytest tests/test_triton_flash.py -m triton``.

This file is the kernels' one correctness harness: ``gpu_check.sh`` runs its ``triton`` tests compiled
on a GPU (``pytest tests/test_triton_flash.py -m triton``), and the benchmark in ``attn_edu/bench``
only times. Both kernels are covered: the teaching one (:mod:`attn_edu.kernels.triton_flash`) and the
fast path (:mod:`attn_edu.kernels.triton_flash_fast`).

Tolerances: float32 outputs 1e-5 and gradients 1e-4, float16 2e-3, bfloat16 2e-2 (absolute and
relative), against float64 peers computed from the same rounded inputs.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from attn_edu.attention import scaled_dot_product_attention
from attn_edu.kernels import triton_available
from attn_edu.masks import causal_mask

REPO = Path(__file__).resolve().parents[1]
INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
ON_GPU = torch.cuda.is_available() and not INTERPRETING
RUN_KERNELS_HERE = triton_available() and (INTERPRETING or ON_GPU)
DEVICE = "cuda" if ON_GPU else "cpu"
BLOCKS = {"block_m": 16, "block_n": 32}  # small tiles: several blocks even for short sequences

TOLERANCES = {  # (outputs, gradients) as assert_close keyword arguments
    torch.float32: ({"atol": 1e-5, "rtol": 1e-5}, {"atol": 1e-4, "rtol": 1e-4}),
    torch.float16: ({"atol": 2e-3, "rtol": 2e-3}, {"atol": 2e-3, "rtol": 2e-3}),
    torch.bfloat16: ({"atol": 2e-2, "rtol": 2e-2}, {"atol": 2e-2, "rtol": 2e-2}),
}

kernel_test = pytest.mark.skipif(
    not RUN_KERNELS_HERE,
    reason="no GPU and no TRITON_INTERPRET=1 here: test_kernels_in_the_interpreter runs it in a child process",
)


# (B, H, H_kv, T, S, D) of the variant sweep: odd lengths, T != S both ways (T > S leaves causal rows
# that see no key), batch > 1, grouped-query heads (H_kv = 1 and H_kv = H / 2), head dims that are not
# powers of two, one-token decoding; default tiles. On a GPU the sizes span several tiles and reach
# D = 128 (the 8-warp launch); in the interpreter (5-10 ms per tile pair) they stay small.
VARIANT_SHAPES = (
    [(2, 3, 3, 127, 129, 64), (1, 4, 2, 256, 256, 128), (2, 2, 1, 300, 100, 40), (1, 2, 2, 1, 77, 32)]
    if ON_GPU
    else [(2, 2, 1, 37, 53, 16), (1, 4, 2, 50, 20, 24), (1, 2, 2, 1, 77, 32)]
)


def _variant_cases() -> list:
    """(kernel, dtype, shape): the teaching kernels on every shape in bfloat16 and on the first two in
    float16 and float32; the fast path on the first shape. On a GPU the fast path runs in 16-bit only: its
    autotuner compiles four configurations of every kernel it tries, and float32 ones (IEEE products,
    no tensor cores) take about 20 s each to compile."""
    cases = [("teaching", torch.bfloat16, shape) for shape in VARIANT_SHAPES]
    cases += [
        ("teaching", dtype, shape) for dtype in (torch.float16, torch.float32) for shape in VARIANT_SHAPES[:2]
    ]
    fast_dtypes = (
        (torch.bfloat16, torch.float16) if ON_GPU else (torch.bfloat16, torch.float16, torch.float32)
    )
    cases += [("fast", dtype, VARIANT_SHAPES[0]) for dtype in fast_dtypes]
    return [
        pytest.param(
            kernel,
            dtype,
            shape,
            id=f"{kernel}-{str(dtype).removeprefix('torch.')}-" + "B{}-H{}-Hkv{}-T{}-S{}-D{}".format(*shape),
        )
        for kernel, dtype, shape in cases
    ]


@pytest.fixture(scope="module")
def triton_flash():
    """The teaching kernels' module, imported only in a process that can run it."""
    import attn_edu.kernels.triton_flash as module

    return module


@pytest.fixture(scope="module")
def triton_flash_fast():
    """The fast path's module (autotuned, exp2), imported only in a process that can run it."""
    import attn_edu.kernels.triton_flash_fast as module

    return module


# --- helpers -----------------------------------------------------------------------------------


def _inputs(B: int, H: int, H_kv: int, T: int, S: int, D: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g).to(DEVICE, dtype)
    k = torch.randn(B, H_kv, S, D, generator=g).to(DEVICE, dtype)
    v = torch.randn(B, H_kv, S, D, generator=g).to(DEVICE, dtype)
    grad_out = torch.randn(B, H, T, D, generator=g).to(DEVICE, dtype)
    return q, k, v, grad_out


def _run(fn, q, k, v, grad_out, **kwargs):
    """Output and gradients of ``fn`` at (q, k, v) with upstream gradient ``grad_out``."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = fn(q, k, v, **kwargs)
    out.backward(grad_out)
    return out.detach(), q.grad, k.grad, v.grad


def _torch_sdpa_float64(q, k, v, is_causal: bool = False, scale: float | None = None):
    """torch SDPA in float64 with the course's bottom-right causal mask (True = may attend)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, S, D)
    mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device) if is_causal else None
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=scale)


def _reference_float64(q, k, v, is_causal: bool = False):
    """The course reference in float64 (bottom-right causal, zeros for a query that sees no key)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, S, D)
    return scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=is_causal)


def _assert_all_close(got, expected, dtype):
    out_tol, grad_tol = TOLERANCES[dtype]
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, expected):
        assert torch.isfinite(a).all(), f"{name} has NaN or inf"
        torch.testing.assert_close(
            a.double(), b.double(), **(out_tol if name == "out" else grad_tol), msg=name
        )


# --- forward and gradients against torch SDPA -------------------------------------------------


@kernel_test
@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T, S, D", [(37, 53, 16), (45, 45, 24)], ids=["T37-S53-D16", "T45-S45-D24"])
def test_matches_torch_sdpa(triton_flash, dtype, is_causal, T, S, D):
    # Lengths that are not multiples of the tiles, T != S, and a head dim padded from 24 to 32.
    q, k, v, grad_out = _inputs(1, 2, 2, T, S, D, dtype)
    got = _run(triton_flash.flash_attention, q, k, v, grad_out, is_causal=is_causal, **BLOCKS)
    expected = _run(_torch_sdpa_float64, q, k, v, grad_out.double(), is_causal=is_causal)
    _assert_all_close(got, expected, dtype)


@kernel_test
@pytest.mark.triton
def test_bfloat16_matches_torch_sdpa(triton_flash):
    # The interpreter multiplies bfloat16 tiles wrongly (triton #11584); the wrapper computes them
    # in float32 there. On a GPU this runs the real bfloat16 kernel.
    q, k, v, grad_out = _inputs(1, 2, 2, 37, 53, 16, torch.bfloat16)
    got = _run(triton_flash.flash_attention, q, k, v, grad_out, is_causal=True, **BLOCKS)
    expected = _run(_torch_sdpa_float64, q, k, v, grad_out.double(), is_causal=True)
    assert got[0].dtype == torch.bfloat16 and got[1].dtype == torch.bfloat16
    _assert_all_close(got, expected, torch.bfloat16)


@kernel_test
@pytest.mark.triton
def test_grouped_query_heads_match_torch_sdpa(triton_flash):
    q, k, v, grad_out = _inputs(1, 4, 2, 33, 40, 16)  # H = 4 query heads share H_kv = 2
    got = _run(triton_flash.flash_attention, q, k, v, grad_out, is_causal=True, **BLOCKS)
    expected = _run(_torch_sdpa_float64, q, k, v, grad_out.double(), is_causal=True)
    assert got[2].shape == k.shape
    _assert_all_close(got, expected, torch.float32)


@kernel_test
@pytest.mark.triton
def test_non_contiguous_inputs_and_custom_scale(triton_flash):
    # (B, T, H, D) tensors viewed as (B, H, T, D): the kernels follow the strides, no copy needed.
    q, k, v, grad_out = (x.transpose(1, 2).contiguous().transpose(1, 2) for x in _inputs(1, 2, 2, 30, 30, 16))
    assert not q.is_contiguous()
    got = _run(triton_flash.flash_attention, q, k, v, grad_out, scale=0.3, **BLOCKS)
    expected = _run(_torch_sdpa_float64, q, k, v, grad_out.double(), scale=0.3)
    _assert_all_close(got, expected, torch.float32)


@kernel_test
@pytest.mark.triton
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("kernel, dtype, shape", _variant_cases())
def test_kernel_variants_match_the_reference(
    triton_flash, triton_flash_fast, kernel, dtype, shape, is_causal
):
    # Default tiles (no block_m/block_n), as callers use them; the fast path's come from its autotuner.
    fn = triton_flash.flash_attention if kernel == "teaching" else triton_flash_fast.flash_attention_fast
    q, k, v, grad_out = _inputs(*shape, dtype=dtype)
    got = _run(fn, q, k, v, grad_out, is_causal=is_causal)
    q64, k64, v64, grad_out64 = (x.double() for x in (q, k, v, grad_out))  # gradients kept in float64
    expected = _run(_reference_float64, q64, k64, v64, grad_out64, is_causal=is_causal)
    assert all(g.dtype == dtype for g in got) and got[2].shape == k.shape
    _assert_all_close(got, expected, dtype)


# --- conventions ------------------------------------------------------------------------------


@kernel_test
@pytest.mark.triton
def test_causal_is_bottom_right_unlike_torch_is_causal(triton_flash):
    q, k, v, _ = _inputs(1, 2, 2, 16, 40, 16)  # 16 new queries after 24 cached keys
    out = triton_flash.flash_attention(q, k, v, is_causal=True, **BLOCKS)
    torch.testing.assert_close(
        out.double(), _torch_sdpa_float64(q, k, v, is_causal=True), atol=1e-5, rtol=1e-5
    )
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # query t sees keys 0..t only
    assert (out - top_left).abs().max() > 0.1


@kernel_test
@pytest.mark.triton
def test_query_with_no_visible_key_gets_zeros_and_zero_gradient(triton_flash):
    # Causal with T = 40 > S = 24: queries 0..15 sit before the first key and see nothing.
    q, k, v, grad_out = _inputs(1, 2, 2, 40, 24, 16)
    got = _run(triton_flash.flash_attention, q, k, v, grad_out, is_causal=True, **BLOCKS)
    out, dq = got[0], got[1]
    assert torch.equal(out[:, :, :16], torch.zeros_like(out[:, :, :16]))
    assert torch.equal(dq[:, :, :16], torch.zeros_like(dq[:, :, :16]))
    expected = _run(
        scaled_dot_product_attention, q.double(), k.double(), v.double(), grad_out.double(), is_causal=True
    )
    _assert_all_close(got, expected, torch.float32)


@kernel_test
@pytest.mark.triton
def test_lse_is_logsumexp_of_the_visible_scores(triton_flash):
    q, k, v, _ = _inputs(1, 2, 2, 40, 24, 16)
    _, lse = triton_flash.flash_attention_forward(q, k, v, is_causal=True, **BLOCKS)
    scores = (q.double() @ k.double().transpose(-2, -1)) / 16**0.5  # (B, H, T, S)
    scores = scores.masked_fill(~causal_mask(40, 24, device=q.device), float("-inf"))
    expected = torch.logsumexp(scores, dim=-1)  # -inf for the rows that see no key
    torch.testing.assert_close(lse.double(), expected, atol=1e-5, rtol=1e-5)
    assert torch.isneginf(lse[:, :, :16]).all()


# --- learned sink logits (gpt-oss) ----------------------------------------------------------------


def _gpt_oss_float64(q, k, v, sinks, is_causal: bool = False):
    """transformers' gpt-oss eager attention in float64, with the course's bottom-right causal mask. Where
    transformers is missing (``gpu_check.sh`` installs nothing), the course reference, which
    ``tests/test_sinks.py`` holds equal to it, stands in."""
    group = q.shape[1] // k.shape[1]
    T, S = q.shape[-2], k.shape[-2]
    allowed = (
        causal_mask(T, S, device=q.device)
        if is_causal
        else torch.ones(T, S, dtype=torch.bool, device=q.device)
    )
    try:
        from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward
    except ImportError:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, S, D)
        return scaled_dot_product_attention(q, k, v, allowed, sinks=sinks)
    module = SimpleNamespace(sinks=sinks, num_key_value_groups=group, training=False)
    additive = torch.zeros(T, S, dtype=torch.float64, device=q.device).masked_fill(~allowed, float("-inf"))
    out, _ = eager_attention_forward(module, q, k, v, additive, scaling=q.shape[-1] ** -0.5)
    return out.transpose(1, 2)  # the peer returns (B, T, H, D)


@kernel_test
@pytest.mark.triton
@pytest.mark.parametrize(
    "is_causal, T, S",
    [(False, 21, 40), (True, 21, 40), (True, 33, 33), (True, 40, 20)],
    ids=["full-T<S", "causal-T<S", "causal-T=S", "causal-T>S"],
)
def test_sinks_equal_gpt_oss_with_every_gradient(triton_flash, is_causal, T, S):
    # Grouped heads (H = 4, H_kv = 2), lengths off the tiles; causal T > S leaves 20 queries with no key. One
    # batch row: the batch is an index of the grid like the head, tested with the kernel variants below.
    q, k, v, grad_out = _inputs(1, 4, 2, T, S, 16)
    sinks = (torch.randn(4, generator=torch.Generator().manual_seed(5)) * 2).to(DEVICE)
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v, sinks)]
    out = triton_flash.flash_attention(*leaves[:3], is_causal=is_causal, sinks=leaves[3], **BLOCKS)
    out.backward(grad_out)
    peers = [x.detach().double().requires_grad_() for x in (q, k, v, sinks)]
    expected = _gpt_oss_float64(*peers, is_causal=is_causal)
    expected.backward(grad_out.double())
    _assert_all_close(
        [out.detach(), *(x.grad for x in leaves[:3])], [expected, *(x.grad for x in peers[:3])], q.dtype
    )
    torch.testing.assert_close(leaves[3].grad.double(), peers[3].grad, **TOLERANCES[q.dtype][1], msg="dsinks")
    if is_causal and T > S:  # all of a keyless query's weight is on the sink: zeros, and lse = its sink
        assert torch.equal(out[:, :, : T - S], torch.zeros_like(out[:, :, : T - S]))
        _, lse = triton_flash.flash_attention_forward(q, k, v, is_causal=True, sinks=sinks, **BLOCKS)
        torch.testing.assert_close(lse[:, :, : T - S], sinks[None, :, None].expand(1, 4, T - S))


@kernel_test
@pytest.mark.triton
def test_bad_sinks_name_the_argument(triton_flash):
    q, k, v, _ = _inputs(1, 2, 2, 5, 9, 16)
    with pytest.raises(ValueError, match=r"sinks: expected shape \(H,\) = \(2,\)"):
        triton_flash.flash_attention(q, k, v, sinks=torch.zeros(3, device=DEVICE))


@kernel_test
@pytest.mark.triton
@pytest.mark.parametrize("module_fixture, name", [("triton_flash", "flash_attention"),
                                                  ("triton_flash_fast", "flash_attention_fast")])  # fmt: skip
def test_docstring_example_with_default_tiles(request, module_fixture, name):
    # The example is marked +SKIP for plain doctest runs (no GPU, no interpreter); run it here.
    module = request.getfixturevalue(module_fixture)
    text = getattr(module, name).__doc__.replace("# doctest: +SKIP", "")
    parsed = doctest.DocTestParser().get_doctest(text, dict(vars(module)), name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(parsed, out=lambda s: None)
    assert parsed.examples and runner.failures == 0, f"{runner.failures} example(s) failed"


# --- bad input ----------------------------------------------------------------------------------


@kernel_test
@pytest.mark.triton
@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape, kwargs, match",
    [
        ((1, 2, 5, 16), (1, 2, 9, 8), (1, 2, 9, 8), {}, r"k: expected shape \(B, H_kv, S, D\)"),
        ((1, 2, 5, 16), (1, 2, 9, 16), (1, 2, 7, 16), {}, r"v: expected shape \(B, H_kv, S, D\)"),
        ((1, 2, 5, 16), (1, 3, 9, 16), (1, 3, 9, 16), {}, r"H_kv key/value heads dividing H=2"),
        ((1, 2, 5, 256), (1, 2, 9, 256), (1, 2, 9, 256), {}, r"head dim D between 1 and 128"),
        ((2, 5, 16), (1, 2, 9, 16), (1, 2, 9, 16), {}, r"q: expected shape \(B, H, T, D\)"),
        ((1, 2, 5, 16), (1, 2, 9, 16), (1, 2, 9, 16), {"block_m": 24}, r"block_m: expected a power of two >= 16"),
        ((1, 2, 5, 16), (1, 2, 9, 16), (1, 2, 9, 16), {"block_n": 8}, r"block_n: expected a power of two >= 16"),
        ((1, 2, 5, 16), (1, 2, 9, 16), (1, 2, 9, 16), {"scale": -1.0}, r"scale: expected a finite number > 0"),
        ((1, 2, 5, 16), (1, 2, 9, 16), (1, 2, 9, 16), {"mask": torch.ones(5, 9, dtype=torch.bool)},
         r"mask: this kernel supports only is_causal"),
    ],
)  # fmt: skip
def test_bad_input_names_the_argument(triton_flash, q_shape, k_shape, v_shape, kwargs, match):
    q, k, v = (torch.randn(shape, device=DEVICE) for shape in (q_shape, k_shape, v_shape))
    with pytest.raises(ValueError, match=match):
        triton_flash.flash_attention(q, k, v, **kwargs)


@kernel_test
@pytest.mark.triton
@pytest.mark.parametrize(
    "k_shape, kwargs, match",
    [
        ((1, 3, 9, 16), {}, r"H_kv key/value heads dividing H=2"),
        ((1, 2, 9, 16), {"mask": torch.ones(5, 9, dtype=torch.bool)}, r"mask: this kernel supports only is_causal"),
    ],
)  # fmt: skip
def test_fast_path_checks_its_input_the_same_way(triton_flash_fast, k_shape, kwargs, match):
    q, k = torch.randn(1, 2, 5, 16, device=DEVICE), torch.randn(k_shape, device=DEVICE)
    with pytest.raises(ValueError, match=match):
        triton_flash_fast.flash_attention_fast(q, k, k, **kwargs)


@kernel_test
@pytest.mark.triton
def test_unsupported_dtype_is_refused(triton_flash):
    q = torch.randn(1, 1, 4, 16, dtype=torch.float64, device=DEVICE)
    with pytest.raises(
        ValueError, match=r"q: expected dtype float16, bfloat16 or float32, got torch.float64"
    ):
        triton_flash.flash_attention(q, q, q)


@kernel_test
@pytest.mark.triton
def test_cpu_tensors_without_the_interpreter_are_explained(triton_flash, monkeypatch):
    monkeypatch.setattr(triton_flash, "INTERPRETING", False)
    q = torch.randn(1, 1, 4, 16)
    with pytest.raises(ValueError, match=r"TRITON_INTERPRET=1 before importing"):
        triton_flash.flash_attention(q, q, q)


# --- the child process, and life without Triton -------------------------------------------------


@pytest.mark.skipif(not triton_available(), reason="triton is not installed")
@pytest.mark.skipif(RUN_KERNELS_HERE, reason="the kernel tests already run in this process")
@pytest.mark.slow  # every kernel test in a child process under TRITON_INTERPRET=1
def test_kernels_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(Path(__file__)),
        "-m",
        "triton",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 20 and "skipped" not in summary, summary


def _python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def test_importing_the_package_never_imports_triton():
    code = (
        "import sys, attn_edu, attn_edu.kernels, attn_edu.bench.flash, attn_edu.bench.timing\n"
        "attn_edu.kernels.triton_available()\n"
        "print('triton' in sys.modules)"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_missing_triton_gives_the_install_hint():
    code = (
        "import sys\n"
        "sys.modules['triton'] = None  # what `import triton` sees on a machine without it\n"
        "import attn_edu.kernels as kernels\n"
        "assert kernels.triton_available() is False\n"
        "try:\n"
        "    import attn_edu.kernels.triton_flash\n"
        "except ImportError as err:\n"
        "    print(type(err).__name__, err)\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("TritonNotInstalledError"), result.stdout
    assert 'pip install "attn-edu[triton]"' in result.stdout
    assert "attn_edu.flash.tiled_attention" in result.stdout
