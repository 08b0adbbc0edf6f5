"""Checks for notebook 12's Triton exercises: a ladder of eight kernels a learner writes with ``@triton.jit``,
one idea per step, in the order the notebook asks for them:

1. 12.11 a tile of scores loaded through its strides, its hidden (causal) entries set to -inf, stored, the lanes
   past the matrix masked;
2. 12.4 a row-softmax kernel, one program per row, its lanes past ``n_cols`` masked;
3. 12.12 a tiled matrix product with ``tl.dot``: the scores ``q kᵀ``, the head dims summed one chunk at a time;
4. 12.5 the online softmax in a kernel: a row streamed in blocks, the running max and sum, its log-sum-exp;
5. 12.13 one query block against every key block: the online softmax with ``acc``, two ``tl.dot`` per block;
6. 12.14 causal block skipping: the same, causal, each program's key loop ending at its diagonal;
7. 12.7 the FlashAttention forward kernel: a batch of sequences, any head dim, queries that see no key;
8. 12.8 the backward kernel for dQ: ``delta = rowsum(dO ∘ O)``, then ``dS = P ∘ (dP - delta)`` per key block.

Each check launches the learner's kernel, found by name, with the grader's copy of the notebook's given launcher
(:mod:`attn_edu.grading.harness`: a launcher rewritten in PyTorch is not what is graded), in Triton's
interpreter on CPU tensors (the exercise notebook and the grading command's worker set ``TRITON_INTERPRET=1``)
or compiled on a GPU. The references are the
library's (:mod:`attn_edu.masks`, :func:`attn_edu.attention.masked_softmax`, :mod:`attn_edu.retrieval`,
:mod:`attn_edu.flash`); the known-wrong versions are written in torch, lane for lane as the kernel computes
them: masked lanes loaded as 0 instead of -inf, a sum never divided by, an old sum not rescaled when the
maximum grows, a causal mask aligned top-left, a scale or a delta forgotten, an accumulator replaced instead of
added to, a key loop that stops a block early.

A message names the mistake and where to look, in words; code appears only in an exercise's last hint.

Levels and minutes follow the track's rule (:data:`~attn_edu.grading.exercise.LEVEL_RATE`: 3 minutes to read,
then minutes per line of the solution by level, at least the level's floor, in fives). The first six steps are
levelled by the idea they add (3 for a tile or a reduction, 4 for a loop that carries values), the two kernels of
FlashAttention 5. Steps 12.14, 12.7 and 12.8 start from the kernel of the step before, so only the lines they add
or change count: 4, 19 and 12.
"""

from __future__ import annotations

import math

import torch

from attn_edu import attention, flash, masks, retrieval
from attn_edu.grading.checks.flash import NEG_INF, running_stats, tiled_variant
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property
from attn_edu.grading.harness import BLOCK_K, BLOCK_M, BLOCK_N, LSE_BLOCK


def _randn(g: torch.Generator, *shape: int, std: float = 1.0) -> torch.Tensor:
    return std * torch.randn(shape, generator=g)


def _padded_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """``x (N, C)`` with zero rows up to ``rows``: what a masked load with a fill of 0 sees past the end."""
    return torch.cat([x, x.new_zeros(rows - x.shape[0], x.shape[1])], dim=0)


# ---------------------------------------------------------------------------------------------------------
# Triton step 1 of 8 (12.11): a tile of scores, loaded through its strides and stored, its edges masked


def _masked_scores_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 5, 9),)),  # smaller than one tile
        Case((_randn(g, 20, 37),), {"column_major": True}),  # T < S (a KV cache), stored column by column
        Case((_randn(g, 33, 33),)),  # three tiles down, two across, ragged both ways
        Case((_randn(g, 17, 40),), {"column_major": True}),
        Case((_randn(g, 40, 24),)),  # T > S: the first 16 queries see no key, their rows all -inf
    ]


def _masked_scores_variant(scores: torch.Tensor, column_major: bool = False, *, how: str) -> torch.Tensor:
    """12.11's kernel in torch with one slip: ``"strides"`` reads the storage as if it were row by row,
    ``"top_left"`` and ``"diagonal"`` hide the wrong keys."""
    T, S = scores.shape
    read = scores
    if how == "strides" and column_major:  # entry (t, s) read at t * S + s of a column-by-column storage
        read = scores.T.contiguous().reshape(T, S)  # (T, S)
    every = torch.ones(T, S, dtype=torch.bool, device=scores.device)  # (T, S)
    if how == "top_left":
        visible = masks.causal_mask_top_left(T, S, device=scores.device)  # key s <= t
    elif how == "diagonal":
        visible = every.tril(S - T - 1)  # key s < S - T + t: a query's own position hidden too
    else:
        visible = masks.causal_mask(T, S, device=scores.device)
    return read.masked_fill(~visible, NEG_INF)


def _masked_scores_mistake(how: str):  # noqa: ANN202
    def wrong(scores, column_major=False):  # noqa: ANN001, ANN202
        return _masked_scores_variant(scores, column_major, how=how)

    return wrong


MASKED_SCORES_KERNEL = Exercise(
    exercise_id="12.11",
    kind="triton",
    title="Triton step 1 of 8: a tile of scores per program, read through its strides, hidden keys set to -inf",
    function_name="masked_scores",
    arg_names=("scores",),
    reference=lambda scores, column_major=False: scores.masked_fill(
        ~masks.causal_mask(*scores.shape, device=scores.device), NEG_INF
    ),
    make_cases=_masked_scores_cases,
    mistakes=(
        Mistake(
            _masked_scores_mistake("strides"),
            "the scores stored column by column come out scrambled: the kernel walks the storage as if a row's "
            "entries sat side by side. Look at how the address of entry (t, s) is built: the launcher passes "
            "the two strides of the input for that.",
        ),
        Mistake(
            _masked_scores_mistake("top_left"),
            "the hidden entries are those of a top-left causal mask: when T and S differ, query t sits at position "
            "S - T + t, so it sees S - T more keys than its row number says. Look at the comparison that "
            "decides which entries become -inf.",
        ),
        Mistake(
            _masked_scores_mistake("diagonal"),
            "each query's own key is hidden too: a query sees the keys up to and including its own position. "
            "Look at the comparison that decides which entries become -inf: it is one too strict.",
        ),
    ),
    hints=(
        "a program owns a rectangle of the matrix: its rows and its columns are two ranges of offsets, and "
        "every entry of the tile pairs one of each. The same pairs give the address to read, the -inf test and "
        "the bounds mask that keeps the last tiles from reaching past T rows or S columns.",
        "rows run down the tile and columns across it: a row offset as a column vector and a column offset as "
        "a row vector broadcast to the whole tile. The input's address of entry (t, s) is t times its row "
        "stride plus s times its column stride; the output is contiguous, so its rows are S apart. Load and "
        "store with the bounds mask; a three-way where then puts -inf where key s lies past S - T + t.",
        "the tile's entries pair rows[:, None] with cols[None, :], rows from t_start + tl.arange(0, BLOCK_T) "
        "and cols from s_start + tl.arange(0, BLOCK_S); the input's addresses are scores_ptr + rows[:, None] "
        "* stride_t + cols[None, :] * stride_s, the output's out_ptr + rows[:, None] * S + cols[None, :]; the "
        "bounds mask is (rows[:, None] < T) & (cols[None, :] < S), for the load (with other=0.0) and the "
        "store; the -inf test is tl.where(cols[None, :] <= rows[:, None] + S - T, x, float('-inf')).",
    ),
    difficulty=3,
    minutes=20,
)


# ---------------------------------------------------------------------------------------------------------
# Triton step 2 of 8 (12.4): a row-softmax kernel; step 4 of 8 (12.5): a row's log-sum-exp streamed over blocks

# LSE_BLOCK: the block width of 12.5's launcher: every row but the shortest spans several blocks


def _next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _rows_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 3, 5, std=2.0),)),  # a row shorter than one block
        Case((_randn(g, 4, 37, std=2.0),)),  # 37 columns in a block of 64 (12.4) or three of 16 (12.5)
        Case((_randn(g, 2, 48, std=2.0),)),  # a whole number of 16-wide blocks
        Case((_randn(g, 5, 100, std=3.0),)),
        Case((_randn(g, 2, 50, std=30.0) + 100.0,), group="large scores"),  # exp(x) overflows float32
    ]


def _padded(x: torch.Tensor, width: int, fill: float) -> torch.Tensor:
    """``x (R, N)`` with columns of ``fill`` up to ``width``: what a load with ``other=fill`` sees."""
    return torch.cat([x, x.new_full((x.shape[0], width - x.shape[1]), fill)], dim=-1)


def _softmax_with_zero_lanes(x: torch.Tensor) -> torch.Tensor:
    lanes = _padded(x, _next_power_of_2(x.shape[-1]), 0.0)  # (R, BLOCK)
    e = torch.exp(lanes - lanes.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True))[:, : x.shape[-1]]


SOFTMAX_KERNEL = Exercise(
    exercise_id="12.4",
    kind="triton",
    title="Triton step 2 of 8: a softmax kernel that writes one row per program, masking the lanes past n_cols",
    function_name="softmax_rows",
    arg_names=("x",),
    reference=lambda x: attention.masked_softmax(x),
    make_cases=_rows_cases,
    mistakes=(
        Mistake(
            _softmax_with_zero_lanes,
            "the lanes past n_cols count in the row's maximum and sum: they were loaded as 0, and exp(0) adds "
            "to the sum. Look at the value the masked load puts in those lanes: it must be one whose "
            "exponential is 0.",
        ),
        Mistake(
            lambda x: torch.exp(x - x.amax(dim=-1, keepdim=True)),
            "the row is not normalised: its exponentials are stored as they are. Look at what is left to do "
            "after the exponential: a softmax's row sums to 1.",
        ),
    ),
    properties=(
        Property(
            "large scores",
            "scores near 100 overflow exp in float32 (it ends near exp(88)) and inf / inf is NaN: look at "
            "what the row is shifted by before the exponential; the shift cancels in the ratio.",
        ),
    ),
    hints=(
        "one program per row: the program's id says which row, a range of lane offsets says which columns. "
        "The lanes past the row's end must count for nothing in the maximum and the sum, and must not be "
        "written.",
        "the program's id along the grid's first axis is the row, a range from 0 to BLOCK the column offsets, "
        "and the row starts row times the row stride after the first element. Load with a mask and a fill "
        "whose exponential is 0, store with the same mask; on the loaded vector subtract its maximum, "
        "exponentiate, divide by the sum: three reductions or maps over axis 0.",
        "cols = tl.arange(0, BLOCK); x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols, "
        "other=float('-inf')); e = tl.exp(x - tl.max(x, axis=0)); "
        "tl.store(out_ptr + row * row_stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)",
    ),
    difficulty=3,
    minutes=20,
)


# ---------------------------------------------------------------------------------------------------------
# Triton step 3 of 8 (12.12): the scores q kᵀ by tl.dot, one tile per program, the head dims in chunks


def _tiled_scores_cases(g: torch.Generator) -> list[Case]:
    def qk(T: int, S: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _randn(g, T, D), _randn(g, S, D)

    return [
        Case(qk(20, 37, 40)),  # D = 40: two whole chunks of 16 and a ragged one
        Case(qk(16, 16, 16)),  # one tile, one chunk
        Case(qk(33, 9, 72)),  # five chunks, the last one 8 wide
        Case(qk(5, 50, 24)),
    ]


def _tiled_scores_variant(q: torch.Tensor, k: torch.Tensor, *, how: str) -> torch.Tensor:
    """12.12's kernel in torch with one slip, chunk by chunk over the head dims as the kernel visits them."""
    T, D = q.shape
    S = k.shape[0]
    chunks = list(range(0, D, BLOCK_K))
    if how == "replaced":  # the accumulator replaced by each chunk's product: the last chunk's is left
        return q[:, chunks[-1] :] @ k[:, chunks[-1] :].T  # (T, S)
    if how == "same_chunk":  # every step of the loop reads the first chunk's dims again
        first = slice(0, min(BLOCK_K, D))
        return len(chunks) * (q[:, first] @ k[:, first].T)  # (T, S)
    if how == "no_fill":  # the last chunk's lanes past D undefined: NaN in every product that sums them
        right = q @ k.T  # (T, S)
        return right if D % BLOCK_K == 0 else torch.full_like(right, float("nan"))
    # "not_transposed": the key tile (BLOCK_N, BLOCK_K) multiplied as it was loaded, not as kᵀ (square tiles)
    width = len(chunks) * BLOCK_K
    q_pad = torch.cat([q, q.new_zeros(T, width - D)], dim=1)  # (T, width)
    k_pad = _padded_rows(torch.cat([k, k.new_zeros(S, width - D)], dim=1), -(-S // BLOCK_N) * BLOCK_N)
    out = q.new_zeros(T, k_pad.shape[0])  # (T, S rounded up to BLOCK_N)
    for n0 in range(0, k_pad.shape[0], BLOCK_N):
        for c0 in chunks:
            key_tile = k_pad[n0 : n0 + BLOCK_N, c0 : c0 + BLOCK_K]  # (BLOCK_N, BLOCK_K), as loaded
            out[:, n0 : n0 + BLOCK_N] += q_pad[:, c0 : c0 + BLOCK_K] @ key_tile
    return out[:, :S]


def _tiled_scores_mistake(how: str):  # noqa: ANN202
    def wrong(q, k):  # noqa: ANN001, ANN202
        return _tiled_scores_variant(q, k, how=how)

    return wrong


TF32 = (
    "every score is off by about a thousandth of its size, which is what float32 products rounded to TF32 "
    "give: a recent GPU does that in Triton's dot of two tiles unless asked for full precision. Look at the "
    "precision each product of tiles is asked for."
)


def _tf32_products(case: Case, got: torch.Tensor) -> str | None:
    """A diagnosis: the learner's scores differ from q kᵀ by no more than products of inputs rounded to TF32's
    10-bit mantissa can (each at most 2^-10 of |q||k| off, truncated or rounded), and by more than 1e-5."""
    q, k = (t.double() for t in case.args)
    if got.shape != (q.shape[0], k.shape[0]) or not bool(torch.isfinite(got).all()):
        return None
    error = (got.double() - q @ k.T).abs()  # (T, S)
    bound = 2.0**-9 * (q.abs() @ k.abs().T) + 1e-6  # (T, S)
    return TF32 if bool((error <= bound).all()) and float(error.max()) > 1e-5 else None


TILED_SCORES_KERNEL = Exercise(
    exercise_id="12.12",
    kind="triton",
    title="Triton step 3 of 8: the scores q kᵀ by tl.dot, a tile per program, the head dims summed chunk by chunk",
    function_name="tiled_scores",
    arg_names=("q", "k"),
    reference=lambda q, k: retrieval.dot_product_score(q, k),
    make_cases=_tiled_scores_cases,
    mistakes=(
        Mistake(
            _tiled_scores_mistake("replaced"),
            "only the last chunk of head dims is in the scores: each step of the loop replaces the tile "
            "instead of adding to it. Look at what the accumulator holds after each chunk.",
        ),
        Mistake(
            _tiled_scores_mistake("same_chunk"),
            "every step of the loop multiplies the first chunk of head dims again: the offsets of the chunk "
            "do not move with the loop. Look at which dims each step loads.",
        ),
        Mistake(
            _tiled_scores_mistake("not_transposed"),
            "the key tile is multiplied as it lies, one key per row, so each product pairs a query's dims with "
            "a key's dims the wrong way round: the scores need kᵀ, one key per column. Look at the shape of "
            "the key tile that goes into the product.",
        ),
        Mistake(
            _tiled_scores_mistake("no_fill"),
            "every score is NaN when D is not a multiple of the chunk: the lanes past D of the last chunk are "
            "loaded without a fill, and a GPU leaves them undefined (NaN here). Look at the value the masked "
            "loads put in those lanes: it must add nothing to a sum of products.",
        ),
    ),
    diagnoses=(_tf32_products,),
    hints=(
        "a program owns one tile of the (T, S) scores. Each score is a sum over the head dims, so walk the dims "
        "a chunk at a time: each chunk gives a small product of a query tile and a key tile, and the tile of "
        "scores is the sum of those products, kept in float32 until it is stored.",
        "for each chunk, load a (BLOCK_M, BLOCK_K) tile of q and a (BLOCK_K, BLOCK_N) tile of kᵀ, which is k "
        "read with the roles of its row and column offsets swapped, both masked with a fill of 0 past T, S or "
        "D. Triton's dot multiplies two tiles (each side 16 or more); ask it for IEEE precision so that a GPU "
        "keeps float32. Store the sum with a mask on T and S.",
        "for each chunk d0 in range(0, D, BLOCK_K), its dims are d0 + tl.arange(0, BLOCK_K); the q tile lies at "
        "q_ptr + rows[:, None] * D + dims[None, :] and the kᵀ tile at k_ptr + cols[None, :] * D + "
        "dims[:, None], each loaded with other=0.0 and a mask on its two axes (rows < T or cols < S, and "
        "dims < D); a float32 tl.zeros([BLOCK_M, BLOCK_N]) gains tl.dot(q_tile, kt_tile, "
        "input_precision='ieee') per chunk, and is stored with the mask rows < T and cols < S.",
    ),
    difficulty=4,
    minutes=40,
)


def _streamed_lse(x: torch.Tensor, rescale: bool, fill: float) -> torch.Tensor:
    """The 12.5 kernel's loop in torch; ``rescale=False`` or ``fill=0`` are the mistakes."""
    N = x.shape[-1]
    lanes = _padded(x, math.ceil(N / LSE_BLOCK) * LSE_BLOCK, fill)  # (R, blocks * BLOCK)
    m = torch.full((x.shape[0],), NEG_INF, device=x.device)
    l = torch.zeros(x.shape[0], device=x.device)  # noqa: E741 - the paper's name
    for start in range(0, N, LSE_BLOCK):
        block = lanes[:, start : start + LSE_BLOCK]  # (R, BLOCK)
        m_new = torch.maximum(m, block.amax(dim=-1))
        alpha = torch.exp(m - m_new) if rescale else torch.ones_like(m)
        l = l * alpha + torch.exp(block - m_new[:, None]).sum(dim=-1)  # noqa: E741
        m = m_new
    return m + torch.log(l)


LSE_KERNEL = Exercise(
    exercise_id="12.5",
    kind="triton",
    title="Triton step 4 of 8: the online softmax in a kernel, a row streamed in blocks to its log-sum-exp",
    function_name="row_logsumexp",
    arg_names=("x",),
    reference=lambda x: flash.logsumexp_from_stats(*running_stats(x, LSE_BLOCK)),
    make_cases=_rows_cases,
    mistakes=(
        Mistake(
            lambda x: _streamed_lse(x, rescale=False, fill=NEG_INF),
            "the running sum is not rescaled when the maximum grows: its old terms were measured against the "
            "old maximum and the new ones against the new. Look at what happens to l when a block raises m.",
        ),
        Mistake(
            lambda x: _streamed_lse(x, rescale=True, fill=0.0),
            "the lanes past n_cols in the last block add to the sum: they were loaded as 0, and exp(0 - m) is "
            "not 0. Look at the value the masked load puts in those lanes.",
        ),
    ),
    properties=(
        Property(
            "large scores",
            "scores near 100 overflow exp in float32: look at what each exponential is taken of; the "
            "running maximum is there to be subtracted, and added back at the end (exercise 12.3).",
        ),
    ),
    hints=(
        "keep two running numbers for the row, its maximum so far and its sum of exponentials measured against "
        "that maximum, and visit the row one block of columns at a time. When a block raises the maximum, the "
        "sum so far must be brought to the new one before the block's terms are added.",
        "m starts at -inf and l at 0; a for loop over range(0, n_cols, BLOCK) loads each block masked, with a "
        "fill whose exponential is 0; the new maximum is the larger of m and the block's own maximum; "
        "l is scaled by exp(m_old - m_new) first. After the loop the row's log-sum-exp comes from m and l as "
        "in exercise 12.3, stored at lse_ptr + row.",
        "for start in range(0, n_cols, BLOCK): the block's columns are start + tl.arange(0, BLOCK), loaded "
        "with mask=cols < n_cols and other=float('-inf'); the new maximum is tl.maximum of m_i and "
        "tl.max(x, axis=0); l_i becomes l_i * tl.exp(m_i - m_new) plus tl.sum(tl.exp(x - m_new), axis=0); "
        "then m_i takes the new maximum. After the loop each program stores one number, m_i + tl.log(l_i), "
        "at lse_ptr + row.",
    ),
    difficulty=4,
    minutes=40,
)


# ---------------------------------------------------------------------------------------------------------
# Triton step 5 of 8 (12.13): one query block against every key block; step 6 of 8 (12.14): causal block skipping


def _attention_loop(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, how: str = ""
) -> torch.Tensor:
    """The kernel of 12.13 (``causal=False``) or 12.14 in torch, block for block, with one known slip named by
    ``how``: keys past S loaded as 0 and given weight, no scale, ``acc`` not rescaled, each block normalised on
    its own, and for the causal one a mask aligned top-left, a loop that stops after the block's first query's
    keys, or blocks skipped but the diagonal block not masked. ``q (T, D)``, ``k`` and ``v (S, D)``."""
    T, D = q.shape
    S = k.shape[0]
    scale = 1.0 if how == "no_scale" else 1 / math.sqrt(D)
    shift = 0 if how == "top_left" else S - T  # query t sees keys s <= t + shift
    padded = -(-S // BLOCK_N) * BLOCK_N
    k_all, v_all = _padded_rows(k, padded), _padded_rows(v, padded)  # (S rounded up, D): the masked loads
    out = torch.empty_like(q)  # (T, D)
    for q_start in range(0, T, BLOCK_M):
        rows = torch.arange(q_start, min(q_start + BLOCK_M, T), device=q.device)  # this block's queries
        key_stop = S
        if causal:
            last = 1 if how == "early_stop" else BLOCK_M  # the block's first query, or past its last
            key_stop = min(S, shift + q_start + last)
        m_i = torch.full((len(rows),), NEG_INF, device=q.device)
        l_i = torch.zeros(len(rows), device=q.device)
        acc = torch.zeros(len(rows), D, device=q.device)  # (bm, D)
        for k_start in range(0, key_stop, BLOCK_N):
            cols = torch.arange(k_start, k_start + BLOCK_N, device=q.device)  # every lane of the block
            scores = q[rows] @ k_all[cols].T * scale  # (bm, BLOCK_N)
            allowed = torch.ones_like(scores, dtype=torch.bool) if how == "padded_keys" else cols[None, :] < S
            if causal and how != "no_diagonal_mask":
                allowed = allowed & (cols[None, :] <= rows[:, None] + shift)
            scores = scores.masked_fill(~allowed, NEG_INF)
            if how == "per_block":
                acc = acc + torch.softmax(scores, dim=-1) @ v_all[cols]
                continue
            m_new = torch.maximum(m_i, scores.amax(dim=-1))
            alpha = torch.exp(m_i - m_new)
            p = torch.exp(scores - m_new[:, None])  # (bm, BLOCK_N)
            l_i = l_i * alpha + p.sum(dim=-1)
            acc = (acc if how == "acc_not_rescaled" else acc * alpha[:, None]) + p @ v_all[cols]
            m_i = m_new
        out[rows] = acc if how == "per_block" else acc / l_i[:, None]
    return out


def _attention_loop_mistake(causal: bool, how: str):  # noqa: ANN202
    def wrong(q, k, v):  # noqa: ANN001, ANN202
        return _attention_loop(q, k, v, causal=causal, how=how)

    return wrong


def _one_sequence_cases(g: torch.Generator, shapes: list[tuple[int, int, int]]) -> list[Case]:
    return [Case((_randn(g, T, D), _randn(g, S, D), _randn(g, S, D))) for T, S, D in shapes]


def _block_attention_cases(g: torch.Generator) -> list[Case]:
    large = (_randn(g, 24, 16, std=10.0), _randn(g, 30, 16, std=10.0), _randn(g, 30, 16))  # scores ~ ±100
    return [
        *_one_sequence_cases(g, [(20, 37, 16), (5, 9, 32), (33, 48, 16), (40, 24, 32), (16, 50, 64)]),
        Case(large, group="large scores"),
    ]


BLOCK_ATTENTION_KERNEL = Exercise(
    exercise_id="12.13",
    kind="triton",
    title="Triton step 5 of 8: one query block against every key block, the online softmax carrying acc",
    function_name="block_attention",
    arg_names=("q", "k", "v"),
    reference=lambda q, k, v: flash.tiled_attention(q, k, v),
    make_cases=_block_attention_cases,
    mistakes=(
        Mistake(
            _attention_loop_mistake(False, "acc_not_rescaled"),
            "acc is not rescaled when the running maximum grows: its rows were weighted against the old "
            "maximum, l's are brought to the new one, and the two no longer match. Look at what happens to "
            "acc when a key block raises m.",
        ),
        Mistake(
            _attention_loop_mistake(False, "padded_keys"),
            "the padded keys past S take part: loaded as zeros, they score 0 and get weight in the sum, so "
            "every row comes out too small when S is not a multiple of the block. Look at the scores of the "
            "lanes past S before the maximum and the exponential.",
        ),
        Mistake(
            _attention_loop_mistake(False, "no_scale"),
            "the scores are not multiplied by the scale 1/sqrt(D) that the launcher passes in. Look at the "
            "line that makes the scores.",
        ),
        Mistake(
            _attention_loop_mistake(False, "per_block"),
            "each key block is normalised on its own, so a row's weights sum to 1 per block (to the number of "
            "blocks in all). Look at where acc is divided by l: once, after the last key block.",
        ),
    ),
    properties=(
        Property(
            "large scores",
            "scores near 100 overflow exp in float32: look at what each exponential is taken of; the running "
            "maximum is there to be subtracted from the scores, and the factor that rescales l and acc is a "
            "difference of maxima.",
        ),
    ),
    hints=(
        "exercise 12.2's loop, for one query block: the program loads its queries once, then visits the keys a "
        "block at a time, and for each query row carries three things across the blocks, the running maximum, "
        "the running sum of weights and the running weighted sum of values, divided once at the end.",
        "in each key block: the scores are q kᵀ times the scale (Triton's dot of the query tile and the "
        "transposed key tile), -inf where a key is past S; then the online softmax of step 4, row by row "
        "(over axis 1): the new maximum, alpha = exp(m_old - m_new) for l and acc, the weights p = "
        "exp(scores - m_new), and acc gains the product p v. Both products ask for IEEE precision. Store "
        "acc / l with a mask on the rows past T.",
        "before the loop: q as a (BLOCK_M, D) tile, m_i = tl.full([BLOCK_M], float('-inf'), tl.float32), l_i "
        "and acc zeros in float32. Per key block at k0: keys = k0 + tl.arange(0, BLOCK_N); kb and vb are the "
        "(BLOCK_N, D) tiles at k_ptr and v_ptr + keys[:, None] * D + dims[None, :], masked on keys < S with "
        "other=0.0; s = tl.dot(q, tl.trans(kb), input_precision='ieee') * scale, then -inf where keys >= S; "
        "m_new = tl.maximum(m_i, tl.max(s, axis=1)); alpha = tl.exp(m_i - m_new); p = tl.exp(s - m_new[:, "
        "None]); l_i and acc are multiplied by alpha (acc by alpha[:, None]) and gain tl.sum(p, axis=1) and "
        "tl.dot(p, vb, input_precision='ieee'). At the end, acc / l_i[:, None] on the rows < T.",
    ),
    difficulty=4,
    minutes=80,
)


def _causal_attention_cases(g: torch.Generator) -> list[Case]:
    # T <= S throughout; S - T not a multiple of 16 in most, so a block's last query reaches a key block
    # its first query does not
    return _one_sequence_cases(g, [(20, 37, 16), (33, 33, 16), (17, 40, 32), (5, 9, 16), (30, 47, 32)])


CAUSAL_ATTENTION_KERNEL = Exercise(
    exercise_id="12.14",
    kind="triton",
    title="Triton step 6 of 8: causal block skipping, each query block's key loop ending at its diagonal",
    function_name="causal_attention",
    arg_names=("q", "k", "v"),
    reference=lambda q, k, v: flash.tiled_attention(q, k, v, is_causal=True),
    make_cases=_causal_attention_cases,
    mistakes=(
        Mistake(
            _attention_loop_mistake(True, "no_diagonal_mask"),
            "the keys past a query's own position count inside the last blocks the loop visits: stopping the "
            "loop skips the blocks that are wholly hidden, but the blocks on the diagonal are partly hidden. "
            "Look at which scores become -inf in those blocks.",
        ),
        Mistake(
            _attention_loop_mistake(True, "early_stop"),
            "the key loop stops too early: it ends after the keys the block's first query sees, but the "
            "block's last query, BLOCK_M - 1 rows further down, sees that many keys more. Look at which query "
            "the loop's end is worked out from.",
        ),
        Mistake(
            _attention_loop_mistake(True, "top_left"),
            "the causal mask is aligned top-left: when T and S differ, query t sits at position S - T + t, so it sees "
            "keys up to S - T + t, and the loop's end moves by S - T too. Look at both places the position "
            "of a query is used.",
        ),
    ),
    hints=(
        "a query block's last query sees the most keys; every key past that one is hidden from the whole "
        "block, so the key blocks that start beyond it need not be loaded at all. End the loop there, and in "
        "the blocks it still visits hide each query's future keys one by one.",
        "query t sits at position S - T + t (bottom-right), so the block that starts at q_start needs keys "
        "up to S - T + q_start + BLOCK_M - 1: the loop's end is one past that, and no more than S. Inside "
        "the loop, the score of key s for query t is -inf when s lies past S - T + t (that hides the padded "
        "keys past S as well).",
        "key_stop = tl.minimum(S, S - T + q_start + BLOCK_M), and the loop runs over range(0, key_stop, "
        "BLOCK_N); inside it the scores pass through tl.where(cols[None, :] <= rows[:, None] + S - T, "
        "scores, float('-inf')) in place of step 5's test on S.",
    ),
    difficulty=4,
    minutes=30,
)


# ---------------------------------------------------------------------------------------------------------
# Triton step 7 of 8 (12.7): the whole forward kernel: a batch of sequences, any D, queries that see no key

FORWARD_BLOCK = 16  # BLOCK_M = BLOCK_N in the 12.7 launcher (tl.dot needs 16 or more)


def _kernel_forward_cases(g: torch.Generator) -> list[Case]:
    def qkv(N: int, T: int, S: int, D: int) -> tuple[torch.Tensor, ...]:
        return _randn(g, N, T, D), _randn(g, N, S, D), _randn(g, N, S, D)

    return [
        Case(qkv(2, 20, 37, 16), {"is_causal": False}),  # T != S, neither a multiple of the block
        Case(qkv(3, 33, 33, 8), {"is_causal": True}),  # D = 8 < 16: padded head dimension
        Case(qkv(1, 17, 40, 32), {"is_causal": True}),  # T < S: a KV cache, query t at position S - T + t
        Case(qkv(2, 5, 9, 12), {"is_causal": False}),  # shorter than one block
        # scores of about ±100: a query's hidden (future) keys can outscore its visible ones by far
        Case(tuple(25.0 * x for x in qkv(1, 24, 24, 16)), {"is_causal": True}),
        Case(qkv(2, 40, 24, 16), {"is_causal": True}, group="queries that see no key"),  # T > S
    ]


def _kernel_forward_mistake(how: str):  # noqa: ANN202
    def wrong(q, k, v, is_causal=False):  # noqa: ANN001, ANN202
        return tiled_variant(q, k, v, is_causal, FORWARD_BLOCK, FORWARD_BLOCK, how=how)

    return wrong


FORWARD_KERNEL = Exercise(
    exercise_id="12.7",
    kind="triton",
    title="Triton step 7 of 8: the FlashAttention forward kernel, a batch of sequences, any head dim, empty rows",
    function_name="flash_forward",
    arg_names=("q", "k", "v"),
    reference=lambda q, k, v, is_causal=False: flash.tiled_attention(q, k, v, is_causal=is_causal),
    make_cases=_kernel_forward_cases,
    mistakes=(
        Mistake(
            _kernel_forward_mistake("top_left"),
            "the causal mask is aligned top-left: when T and S differ, query t sits at position S - T + t, so it sees "
            "keys up to S - T + t, and the last key block to visit moves by S - T too. Look at both places "
            "the position of a query is used.",
        ),
        Mistake(
            _kernel_forward_mistake("no_scale"),
            "the scores are not multiplied by the scale 1/sqrt(D) that the launcher passes in. Look at the "
            "line that makes the scores.",
        ),
        Mistake(
            _kernel_forward_mistake("acc_not_rescaled"),
            "acc is not rescaled when the running maximum grows: its rows were weighted against the old "
            "maximum, l's are brought to the new one, and the two no longer match. Look at what happens to "
            "acc when a key block raises m.",
        ),
        Mistake(
            _kernel_forward_mistake("mask_after_exp"),
            "the causal mask is applied after the exponential: the running maximum then counts the scores of "
            "keys the query may not see, and where those are far larger every visible weight underflows to 0 "
            "(0 / 0 = NaN). Look at where the hidden scores become -inf: before the maximum.",
        ),
        Mistake(
            _kernel_forward_mistake("fp16_acc"),
            "acc is kept in float16: every update rounds it to about three significant digits. Look at the "
            "type acc is created with: accumulate in float32, and cast only when the output is stored.",
        ),
    ),
    properties=(
        Property(
            "queries that see no key",
            "with is_causal and T > S the first T - S queries see no key: their m stays -inf and l 0, and "
            "exp(-inf - (-inf)) and 0 / 0 are NaN. Look at the maximum a row that has seen nothing yet is "
            "measured against, and at the final division: those rows must come out as zeros.",
        ),
    ),
    hints=(
        "the kernel of step 6 with three more things: program (i, n) works on sequence n of a batch, so every "
        "address starts at that sequence's rows; the head dim may be smaller than the block, so loads and "
        "stores are masked across the dims too; and with T > S some queries see no key at all and must come "
        "out as zeros, not NaN.",
        "sequence n's row t starts at n * T * D + t * D (its keys at n * S * D + s * D); the masks pair rows "
        "and dims (rows < T and dims < D). For the empty rows: measure against 0 where the running maximum is "
        "still -inf, divide by l only where it is positive, and let the causal loop end at no less than 0.",
        "sequence n's offsets: n * T * D + rows[:, None] * D + dims[None, :] (keys: n * S * D + ...), masked "
        "with (rows[:, None] < T) & (dims[None, :] < D); the causal loop ends at tl.minimum(S, tl.maximum(0, "
        "S - T + q_start + BLOCK_M)); a row that has seen nothing is measured against "
        "tl.where(m_new == float('-inf'), 0.0, m_new) in alpha and p; the output divides acc by "
        "tl.where(l_i > 0, l_i, 1.0)[:, None].",
    ),
    difficulty=5,
    minutes=115,
)


# ---------------------------------------------------------------------------------------------------------
# Triton step 8 of 8 (12.8): the backward pass's delta and dQ kernel


def _dq_cases(g: torch.Generator) -> list[Case]:
    def case(N: int, T: int, S: int, D: int, is_causal: bool) -> Case:
        q, k, v = _randn(g, N, T, D), _randn(g, N, S, D), _randn(g, N, S, D)
        out = attention.scaled_dot_product_attention(q, k, v, is_causal=is_causal)  # the forward's output
        return Case((q, k, v, out, _randn(g, N, T, D)), {"is_causal": is_causal})

    return [
        case(2, 20, 37, 16, False),  # T != S, neither a multiple of the block
        case(3, 33, 33, 8, True),  # D = 8: padded head dimension
        case(1, 17, 40, 32, True),  # T < S: queries at positions S - T + t
        case(2, 5, 9, 12, False),
    ]


def _dq_reference(q, k, v, out, grad_out, is_causal=False):  # noqa: ANN001, ANN202
    _, lse = flash.tiled_attention_forward(q, k, v, is_causal=is_causal)
    return flash.tiled_attention_backward(q, k, v, out, lse, grad_out, is_causal=is_causal)[0]


def _dq_variant(q, k, v, out, grad_out, is_causal=False, *, how: str):  # noqa: ANN001, ANN202
    """dQ = dS K · scale with dS = P ∘ (dP - delta), written densely, with one known slip."""
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(D)
    scores = q @ k.transpose(-2, -1) * scale  # (N, T, S)
    every = torch.ones(T, S, dtype=torch.bool, device=q.device)  # (T, S) on the scores' device
    seen = every.tril(S - T) if is_causal else every
    lse = torch.logsumexp(scores.masked_fill(~seen, NEG_INF), dim=-1, keepdim=True)  # the launcher's lse
    used = every.tril() if how == "top_left" and is_causal else seen
    p = torch.exp(scores - lse).masked_fill(~used, 0.0)  # (N, T, S)
    d_p = grad_out @ v.transpose(-2, -1)  # (N, T, S)
    delta = 0.0 if how == "no_delta" else (grad_out * out).sum(dim=-1, keepdim=True)  # (N, T, 1)
    return (p * (d_p - delta)) @ k * (1.0 if how == "no_scale" else scale)


def _dq_mistake(how: str):  # noqa: ANN202
    def wrong(q, k, v, out, grad_out, is_causal=False):  # noqa: ANN001, ANN202
        return _dq_variant(q, k, v, out, grad_out, is_causal, how=how)

    return wrong


DQ_KERNEL = Exercise(
    exercise_id="12.8",
    kind="triton",
    title="Triton step 8 of 8: the backward kernel for dQ, delta = rowsum(dO ∘ O), then dS = P ∘ (dP - delta)",
    function_name="flash_dq",
    arg_names=("q", "k", "v", "out", "grad_out"),
    reference=_dq_reference,
    make_cases=_dq_cases,
    mistakes=(
        Mistake(
            _dq_mistake("no_scale"),
            "the scale is missing from dQ: the scores were q kᵀ times the scale, so the chain rule multiplies "
            "dQ by the scale too. Look at what is added to the accumulator in each key block.",
        ),
        Mistake(
            _dq_mistake("no_delta"),
            "delta is missing: the softmax's backward subtracts from dP, per query row, the sum over the head "
            "dim of dO ∘ O. Look at what dS is made of, and compute that number once, before the key loop.",
        ),
        Mistake(
            _dq_mistake("top_left"),
            "the causal mask is aligned top-left: query t sits at position S - T + t and sees keys up to "
            "S - T + t. Look at both places the position of a query is used.",
        ),
    ),
    hints=(
        "one program per query block, as in the forward, but with no running maximum: lse already normalises "
        "the weights, so each key block's weights can be rebuilt exactly, and dQ is a sum over the key blocks "
        "of their share, the softmax's backward times the keys.",
        "before the loop: load the block's q, O and dO rows and their lse, and delta, the sum over the head "
        "dim of dO ∘ O (a sum over axis 1). In each key block: P = exp(q kᵀ · scale - lse), 0 where a key "
        "is hidden; dP = dO Vᵀ; dS = P ∘ (dP - delta); the accumulator gains dS K times the scale. Skip the "
        "causal blocks as the forward does; every product of tiles asks for IEEE precision.",
        "before the loop, delta = tl.sum(do * o, axis=1) and a float32 accumulator of zeros; in each key "
        "block, p is tl.exp(scores - lse[:, None]) where the key is allowed and 0 elsewhere, dp is "
        "tl.dot(do, tl.trans(v), input_precision='ieee'), and the accumulator gains tl.dot(p * (dp - "
        "delta[:, None]), k, input_precision='ieee') * scale; store it with the rows' mask.",
    ),
    difficulty=5,
    minutes=75,
)


# In the order of the ladder, as the notebook asks for them
EXERCISES = (
    MASKED_SCORES_KERNEL,
    SOFTMAX_KERNEL,
    TILED_SCORES_KERNEL,
    LSE_KERNEL,
    BLOCK_ATTENTION_KERNEL,
    CAUSAL_ATTENTION_KERNEL,
    FORWARD_KERNEL,
    DQ_KERNEL,
)
