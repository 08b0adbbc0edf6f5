"""Checks for notebook 11's exercises: a sliding-window mask, causal linear attention (parallel and recurrent
forms), a top-k router, how many stacked windows reach the first token (a measurement), and top-k key selection
under a causal mask. The recurrent-state exercises (Gated DeltaNet) are in :mod:`attn_edu.grading.checks.recurrent`.

The references are :func:`attn_edu.sparse.sliding_window_mask`, :func:`attn_edu.efficient.linear_attention`
(``is_causal=True``), :func:`attn_edu.efficient.linear_attention_recurrent`, :class:`attn_edu.moe.TopKRouter`
and :func:`attn_edu.sparse.layers_to_reach` (11.5's layers may cycle through several windows; the learner measures
the reach by following the masks, and the answer is checked on products of the library's masks). Cases
mix ``T < S`` (a cache of earlier keys), batch and head dimensions with odd sizes, and ``D != Dv``. The
known-wrong versions are the usual slips: a window one key too wide or too narrow, a symmetric band where a
causal one was asked, no normaliser, a prefix sum over the wrong axis, reading the state before adding the
current token, softmax taken before top-k, a receptive field that grows by ``window`` per layer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from attn_edu import efficient, moe, sparse
from attn_edu.attention import scaled_dot_product_attention
from attn_edu.grading.exercise import (
    OVERFLOW_HINT,
    Case,
    Exercise,
    Mistake,
    Property,
    overflow_diagnosis,
    unshifted_softmax,
)


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


# ---------------------------------------------------------------------------------------------------------
# 11.1 sliding-window mask


def _window_cases(g: torch.Generator) -> list[Case]:
    T = int(torch.randint(3, 9, (1,), generator=g))
    S = T + int(torch.randint(1, 6, (1,), generator=g))
    return [
        Case((7, 7, 3)),
        Case((5, 9, 2)),  # a cache of 4 earlier keys: bottom-right
        Case((6, 6, 2), {"causal": False}),
        Case((4, 11, 3), {"causal": False}),
        Case((6, 6, 1)),  # window 1: each query sees only itself
        Case((T, S, 4), {"causal": True}),
        Case((T, T, 5), {"causal": False}),
    ]


def _offsets(T: int, S: int, *, bottom_right: bool = True) -> torch.Tensor:
    rows = torch.arange(T)[:, None] + ((S - T) if bottom_right else 0)  # (T, 1) absolute query positions
    return rows - torch.arange(S)[None, :]  # (T, S): how far key s lies behind query t


def _band(T: int, S: int, low: int, high: int, *, bottom_right: bool = True) -> torch.Tensor:
    offset = _offsets(T, S, bottom_right=bottom_right)  # (T, S)
    return (offset >= low) & (offset <= high)  # (T, S)


def _window_reference(T: int, S: int, window: int, causal: bool = True) -> torch.Tensor:
    return sparse.sliding_window_mask(T, S, window=window, causal=causal)


SLIDING_WINDOW = Exercise(
    exercise_id="11.1",
    title="a bool sliding-window mask (T, S): causal or bidirectional, bottom-right aligned",
    function_name="sliding_window_mask",
    arg_names=("T", "S", "window"),
    reference=_window_reference,
    make_cases=_window_cases,
    mistakes=(
        Mistake(
            lambda T, S, window, causal=True: (
                _band(T, S, 0, window) if causal else _band(T, S, -window, window)
            ),
            "off by one: the window is one key too wide. Causal: query at position p sees keys "
            "p - window + 1 .. p (window keys, itself included), so use 0 <= p - s < window, not <=.",
        ),
        Mistake(
            lambda T, S, window, causal=True: (
                _band(T, S, 0, window - 2) if causal else _band(T, S, 2 - window, window - 2)
            ),
            "off by one: the window is one key too narrow. The query's own token counts: "
            "0 <= p - s < window keeps window keys (p - s = 0, 1, ..., window - 1).",
        ),
        Mistake(
            lambda T, S, window, causal=True: _band(T, S, 1 - window, window - 1),
            "with causal on, the band is symmetric, so queries see future keys: keep only keys that are "
            "not ahead of the query (p - s ≥ 0).",
        ),
        Mistake(
            lambda T, S, window, causal=True: _band(T, S, 0, window - 1),
            "with causal off, the band must reach both ways: |p - s| < window (2·window - 1 keys); your "
            "mask keeps only the keys behind the query.",
        ),
        Mistake(
            lambda T, S, window, causal=True: (
                _band(T, S, 1 - window, 0) if causal else _band(T, S, 1 - window, window - 1)
            ),
            "the causal band looks ahead: query p sees keys p .. p + window - 1 (the future). "
            "The offset is p - s with the key behind the query: 0 <= p - s < window.",
        ),
        Mistake(
            lambda T, S, window, causal=True: (
                _band(T, S, 0, window - 1, bottom_right=False)
                if causal
                else _band(T, S, 1 - window, window - 1, bottom_right=False)
            ),
            "the band is aligned top-left: with S > T keys query t sits at absolute position "
            "p = S - T + t (the last T tokens are the queries), so measure offsets from p, not t.",
        ),
        Mistake(
            lambda T, S, window, causal=True: ~_window_reference(T, S, window, causal),
            "the polarity is inverted: True means *may attend* (the keys inside the window).",
        ),
    ),
    hints=(
        "query t sits at absolute position p = S - T + t; compute the offset p - s for every key s "
        "with broadcasting: a (T, 1) column minus a (1, S) row.",
        "causal: the key is inside the window when 0 <= p - s < window; bidirectional: |p - s| < window.",
        "build the (T, S) offsets from two aranges (shift the query positions by S - T), then write the "
        "conditions of hint 2 as bool comparisons on it; & combines two comparisons.",
    ),
    difficulty=2,
    minutes=15,
)


# ---------------------------------------------------------------------------------------------------------
# 11.2 causal linear attention, parallel form (prefix sums)


def _qkv(
    g: torch.Generator, batch: tuple[int, ...], T: int, S: int, D: int, Dv: int
) -> tuple[torch.Tensor, ...]:
    return _randn(g, *batch, T, D), _randn(g, *batch, S, D), _randn(g, *batch, S, Dv)


def _parallel_cases(g: torch.Generator) -> list[Case]:
    T = int(torch.randint(2, 7, (1,), generator=g))
    return [
        Case(_qkv(g, (), 6, 6, 4, 4)),
        Case(_qkv(g, (2, 3), 5, 5, 6, 7)),  # (B, H, T, D) with an odd head count, D != Dv
        Case(_qkv(g, (2,), 3, 8, 5, 3)),  # T < S: 5 cached keys before the queries
        Case(_qkv(g, (1, 5), 1, 6, 8, 4)),  # one new token sees every key
        Case(_qkv(g, (3,), T, T + 4, 3, 6)),
    ]


def _phi(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1


def _prefix_parts(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, feature_map=_phi, *, sum_dim: int = -3
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """φ(q), Σ φ(k) vᵀ and Σ φ(k) prefix sums over the keys (or, for a mistake, over another axis)."""
    qf, kf = feature_map(q), feature_map(k)  # (..., T, F), (..., S, F)
    kv = torch.cumsum(kf[..., :, None] * v[..., None, :], dim=sum_dim)  # (..., S, F, Dv)
    z = torch.cumsum(kf, dim=sum_dim + 1)  # (..., S, F)
    return qf, kv, z


def _read(qf: torch.Tensor, kv: torch.Tensor, z: torch.Tensor, *, normalise: bool = True) -> torch.Tensor:
    """Outputs for the queries from the last T prefix sums: φ(q)ᵀ S / φ(q)ᵀ z."""
    T = qf.shape[-2]
    kv, z = kv[..., -T:, :, :], z[..., -T:, :]  # (..., T, F, Dv), (..., T, F): bottom-right
    numerator = (qf[..., :, None, :] @ kv).squeeze(-2)  # (..., T, Dv)
    if not normalise:
        return numerator
    return numerator / ((qf * z).sum(dim=-1, keepdim=True) + 1e-6)  # (..., T, Dv)


def _exclusive(qf: torch.Tensor, kv: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefix sums shifted by one key: each query misses its own token."""
    kv = torch.cat([torch.zeros_like(kv[..., :1, :, :]), kv[..., :-1, :, :]], dim=-3)  # (..., S, F, Dv)
    z = torch.cat([torch.zeros_like(z[..., :1, :]), z[..., :-1, :]], dim=-2)  # (..., S, F)
    return kv, z


def _top_left(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    qf, kv, z = _prefix_parts(q, k, v)
    T = q.shape[-2]
    return _read(qf, kv[..., :T, :, :], z[..., :T, :])  # the first T prefix sums: query t sees keys 0..t


def _parallel_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return efficient.linear_attention(q, k, v, is_causal=True)


LINEAR_PARALLEL = Exercise(
    exercise_id="11.2",
    title="causal linear attention with φ(x) = elu(x) + 1, parallel form (prefix sums over the keys)",
    function_name="causal_linear_attention",
    arg_names=("q", "k", "v"),
    reference=_parallel_reference,
    make_cases=_parallel_cases,
    mistakes=(
        Mistake(
            lambda q, k, v: _read(*_prefix_parts(q, k, v), normalise=False),
            "the normaliser is missing: divide φ(q_t)ᵀ Σ φ(k_s) v_sᵀ by φ(q_t)ᵀ Σ φ(k_s), the same sum "
            "without the values, so the weights of each query add up to 1.",
        ),
        Mistake(
            lambda q, k, v: _read(*_prefix_parts(q, k, v, sum_dim=-2)),
            "the prefix sum runs over the wrong axis (the features): it must run over the keys, the axis "
            "of the S key positions.",
        ),
        Mistake(
            lambda q, k, v: efficient.linear_attention(q, k, v),
            "this is not causal: every query sums over all keys. Use prefix sums over the keys, so that "
            "query t only sees keys up to its own position.",
        ),
        Mistake(
            lambda q, k, v: (lambda qf, kv, z: _read(qf, *_exclusive(qf, kv, z)))(*_prefix_parts(q, k, v)),
            "each query misses its own token (an exclusive prefix sum): the sums for position p "
            "include key p itself.",
        ),
        Mistake(
            _top_left,
            "the prefix sums are aligned top-left: with S > T, query t sits at position S - T + t, "
            "so it reads the last T prefix sums ([..., -T:, ...]), not the first T.",
        ),
        Mistake(
            lambda q, k, v: _read(*_prefix_parts(q, k, v, feature_map=lambda x: x)),
            "the feature map is missing: apply φ(x) = elu(x) + 1 to q and k. Raw dot products can be "
            "negative, so the normaliser can pass through 0.",
        ),
        Mistake(
            lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True),
            "this is causal softmax attention; linear attention replaces exp(q·k/√D) by φ(q)·φ(k) with "
            "φ(x) = elu(x) + 1, and never forms the (T, S) score matrix.",
        ),
    ),
    hints=(
        "out_t = φ(q_t)ᵀ S_t / φ(q_t)ᵀ z_t with S_t = Σ_{s ≤ p} φ(k_s) v_sᵀ and z_t = Σ_{s ≤ p} φ(k_s), "
        "p = S - T + t; a running (prefix) sum over the key axis gives every S_t and z_t at once.",
        "the products φ(k_s) v_sᵀ for every key are outer products, shape (..., S, F, Dv); their prefix "
        "sum runs along the key axis (the third from last); the T queries read the last T prefix sums, "
        "as the bottom-right alignment puts them at the end.",
        "a sketch: kf = F.elu(k) + 1; state = torch.cumsum(kf[..., :, None] * v[..., None, :], "
        "dim=-3)[..., -T:, :, :]; per query, the numerator is the (1, F) row φ(q_t) times its (F, Dv) "
        "prefix sum, and the denominator the dot product of φ(q_t) with its (F,) prefix sum (keep a "
        "trailing dim of 1 to divide).",
    ),
    difficulty=4,
    minutes=35,
    atol=1e-4,
)


# ---------------------------------------------------------------------------------------------------------
# 11.3 causal linear attention, recurrent form (an RNN with a (F, Dv) state)


def _recurrent_cases(g: torch.Generator) -> list[Case]:
    T = int(torch.randint(3, 9, (1,), generator=g))
    return [
        Case(_qkv(g, (), 6, 6, 4, 4)),
        Case(_qkv(g, (2, 3), 5, 5, 6, 7)),  # (B, H, T, D): odd head count, D != Dv
        Case(_qkv(g, (1,), 1, 1, 5, 3)),  # a single token
        Case(_qkv(g, (3,), T, T, 3, 5)),
    ]


def _rnn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, read_first=False, eps=1e-6, keep_z=True):
    """A loop over tokens with the slips a learner can make, switched on by the arguments."""
    qf, kf = _phi(q), _phi(k)  # (..., T, F)
    state = torch.zeros(*kf.shape[:-2], kf.shape[-1], v.shape[-1])  # (..., F, Dv)
    z = torch.zeros(kf.shape[:-2] + kf.shape[-1:])  # (..., F)
    outputs = []
    for t in range(q.shape[-2]):
        if read_first:  # the output is read before the token is added
            outputs.append(
                (qf[..., t, None, :] @ state).squeeze(-2) / ((qf[..., t, :] * z).sum(-1, keepdim=True) + eps)
            )
        state = state + kf[..., t, :, None] * v[..., t, None, :]  # (..., F, Dv)
        z = z + kf[..., t, :] if keep_z else kf[..., t, :]  # (..., F)
        if not read_first:
            outputs.append(
                (qf[..., t, None, :] @ state).squeeze(-2) / ((qf[..., t, :] * z).sum(-1, keepdim=True) + eps)
            )
    return torch.stack(outputs, dim=-2)  # (..., T, Dv)


def _recurrent_numerator_only(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    qf, kv, z = _prefix_parts(q, k, v)
    return _read(qf, kv, z, normalise=False)


READ_FIRST = (
    "the output is read before the current token is added to the state, so each token misses itself "
    "(and the first output is 0/0): update S and z first, then read φ(q_t)ᵀ S / φ(q_t)ᵀ z."
)

LINEAR_RECURRENT = Exercise(
    exercise_id="11.3",
    kind="build",
    title="causal linear attention as an RNN: a (D, Dv) state S and a (D,) normaliser z updated per token",
    function_name="linear_attention_rnn",
    arg_names=("q", "k", "v"),
    reference=lambda q, k, v: efficient.linear_attention_recurrent(q, k, v),
    make_cases=_recurrent_cases,
    mistakes=(
        Mistake(lambda q, k, v: _rnn(q, k, v, read_first=True), READ_FIRST),
        Mistake(lambda q, k, v: _rnn(q, k, v, read_first=True, eps=0.0), READ_FIRST),
        Mistake(
            _recurrent_numerator_only,
            "the normaliser is missing: keep a running z_t = z_(t-1) + φ(k_t) too and divide by φ(q_t)ᵀ z_t.",
        ),
        Mistake(
            lambda q, k, v: _rnn(q, k, v, keep_z=False),
            "z is replaced instead of accumulated: z_t = z_(t-1) + φ(k_t), a running sum like S_t.",
        ),
        Mistake(
            lambda q, k, v: v.clone(),
            "each output equals its own value vector: the state is overwritten at every step instead of "
            "accumulated. S_t = S_(t-1) + φ(k_t) v_tᵀ and z_t = z_(t-1) + φ(k_t).",
        ),
    ),
    hints=(
        "start from S = zeros(..., D, Dv) and z = zeros(..., D); for each t add φ(k_t) v_tᵀ to S and "
        "φ(k_t) to z, then read the output of token t.",
        "φ(k_t) v_tᵀ is an outer product, shape (..., D, Dv): a column of D features times a row of Dv "
        "values; add it to S and φ(k_t) to z before reading token t's output, which then includes the "
        "token itself.",
        "a sketch: S = S + kf[..., t, :, None] * v[..., t, None, :]; z = z + kf[..., t, :]; φ(q_t)ᵀ S is "
        "a (Dv,) vector, φ(q_t)ᵀ z one number per row (keep its dim to broadcast); collect the T outputs "
        "in a list and stack them on the token dim.",
    ),
    difficulty=4,
    minutes=45,
    atol=1e-4,
)


# ---------------------------------------------------------------------------------------------------------
# 11.4 top-k router (softmax over the k chosen logits, the convention of attn_edu.moe.TopKRouter)


def _router_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 6, 5), _randn(g, 4, 5), 2)),  # x (N, C), gate_weight (E, C), k
        Case((_randn(g, 9, 7), _randn(g, 8, 7), 2)),
        Case((_randn(g, 5, 6), _randn(g, 5, 6), 1)),  # k = 1 (Switch-style routing)
        Case((_randn(g, 11, 3), _randn(g, 6, 3), 3)),
        Case((_randn(g, 7, 4), _randn(g, 3, 4), 2)),
        _sharp_router(_randn(g, 6, 5), _randn(g, 5, 5), 3),  # the largest logit 200: exp overflows unshifted
    ]


def _sharp_router(x: torch.Tensor, gate_weight: torch.Tensor, k: int) -> Case:
    """x scaled so that the largest logit is 200, past exp's float32 range (about 88)."""
    return Case((x * (200.0 / (x @ gate_weight.T).max()), gate_weight, k))


def _route_reference(x: torch.Tensor, gate_weight: torch.Tensor, k: int) -> torch.Tensor:
    E, C = gate_weight.shape
    router = moe.TopKRouter(C, E, k=k)
    with torch.no_grad():
        router.gate.weight.copy_(gate_weight)
        weights, expert_index, _ = router(x)  # (N, k), (N, k)
    return torch.zeros(x.shape[0], E).scatter(1, expert_index, weights)  # (N, E)


def _keep_top_k(values: torch.Tensor, logits: torch.Tensor, k: int, *, largest: bool = True) -> torch.Tensor:
    index = logits.topk(k, dim=-1, largest=largest).indices  # (N, k)
    return torch.zeros_like(values).scatter(1, index, values.gather(1, index))  # (N, E)


def _softmax_of_chosen(
    logits: torch.Tensor, k: int, *, largest: bool, softmax: Callable = torch.softmax
) -> torch.Tensor:
    top, index = logits.topk(k, dim=-1, largest=largest)  # (N, k), (N, k)
    return torch.zeros_like(logits).scatter(1, index, softmax(top, dim=-1))  # (N, E)


def _unshifted_routing(x: torch.Tensor, gate_weight: torch.Tensor, k: int) -> torch.Tensor:
    logits = x @ gate_weight.T  # (N, E)
    return _softmax_of_chosen(logits, k, largest=True, softmax=unshifted_softmax)  # (N, E), NaN past 88


TOP_K_ROUTER = Exercise(
    exercise_id="11.4",
    title="top-k routing weights (N, E): softmax over each token's k largest logits, 0 elsewhere",
    function_name="top_k_routing",
    arg_names=("x", "gate_weight", "k"),
    reference=_route_reference,
    make_cases=_router_cases,
    mistakes=(
        Mistake(
            lambda x, w, k: _keep_top_k(torch.softmax(x @ w.T, dim=-1), x @ w.T, k),
            "the softmax runs over all E experts before the top-k, so each token's k weights sum to "
            "less than 1 (Switch Transformer's convention). attn_edu's TopKRouter (Shazeer et al. 2017) "
            "takes the top-k logits first, then the softmax over those k.",
        ),
        Mistake(
            lambda x, w, k: torch.softmax(x @ w.T, dim=-1),
            "every expert gets a weight: keep only each token's k largest logits and set the other E - k "
            "weights to 0.",
        ),
        Mistake(
            lambda x, w, k: _keep_top_k(torch.softmax(x @ w.T, dim=0), x @ w.T, k),
            "the softmax runs over the tokens (dim 0); each token's weights are a softmax over the "
            "experts, the last dim.",
        ),
        Mistake(
            lambda x, w, k: _softmax_of_chosen(x @ w.T, k, largest=False),
            "the k *smallest* logits were kept: each token needs its k largest.",
        ),
        Mistake(
            lambda x, w, k: _route_reference(x, w, k).gt(0).float(),
            "the chosen experts all get weight 1: mix them with a softmax over their k logits, so a "
            "token's weights sum to 1 and reflect how well each expert matches.",
        ),
        Mistake(
            lambda x, w, k: _keep_top_k(x @ w.T, x @ w.T, k),
            "these are the raw logits of the chosen experts: turn them into weights with a softmax "
            "over the k chosen logits.",
        ),
        Mistake(_unshifted_routing, OVERFLOW_HINT),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_routing),),
    hints=(
        "each token scores every expert with a linear map (E logits); it keeps only its k best experts "
        "and mixes them with a softmax over those k logits; every other expert gets weight 0.",
        "attn_edu's convention: the top k first, then the softmax over the k chosen logits only, then "
        "write those k weights into an (N, E) tensor of zeros at the chosen experts' indices.",
        "a sketch: logits = x @ gate_weight.T, (N, E); values, index = logits.topk(k, dim=-1); "
        "Tensor.scatter(dim, index, src) writes src[i, j] to position (i, index[i, j]): scatter "
        "torch.softmax(values, dim=-1) along dim 1 of a zero (N, E) tensor.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 11.5 how many stacked sliding-window layers, each with its own window, before the last token can depend on token 0

REACHABILITY = "the masks' reachability"


def _reach_cases(g: torch.Generator) -> list[Case]:
    def windows(*w: int) -> torch.Tensor:
        return torch.tensor(w, dtype=torch.int64)  # (n,) the pattern, repeated layer after layer

    T, w = int(torch.randint(20, 60, (1,), generator=g)), int(torch.randint(2, 12, (1,), generator=g))
    local = int(torch.randint(2, 6, (1,), generator=g))
    fixed = [
        (11, windows(4)),  # one window for every layer: ragged, 10 = 3 + 3 + 3 + 1
        (10, windows(4)),  # 9 = 3 · 3 exactly
        (30, windows(3, 3, 3, 100)),  # three local layers, then a full causal one (Gemma's pattern)
        (25, windows(2, 5)),  # alternating windows
        (9, windows(1, 3)),  # a layer of window 1 carries nothing on
        (1, windows(5)),  # one token: 0 layers
        (6, windows(1)),  # window 1 only: never
        (T, windows(local, local, T + 5)),
    ]
    checked = [
        (1, windows(1)),
        (9, windows(1, 1)),
        (14, windows(5)),
        (T + 3, windows(w + 1, 2)),
        (T, windows(2)),
    ]
    return [Case(args) for args in fixed] + [Case(args, group=REACHABILITY) for args in checked]


def _cumulative_reach(
    seq_len: int, windows: torch.Tensor, *, step: int = 1, target: int | None = None
) -> int:
    """The first layer count whose summed reach, (window - step) per layer, covers ``target`` positions
    (default ``seq_len - 1``); ``-1`` when a whole round of the pattern adds nothing."""
    target = seq_len - 1 if target is None else target
    gains = [max(int(w) - step, 0) for w in windows.tolist()]  # positions each layer carries information back
    if target <= 0:
        return 0
    if sum(gains) == 0:
        return -1
    reach, layers = 0, 0
    while reach < target:
        reach, layers = reach + gains[layers % len(gains)], layers + 1
    return layers


def _layers_reference(seq_len: int, windows: torch.Tensor) -> torch.Tensor:
    if windows.unique().numel() == 1:  # one window for every layer: the library's count
        return torch.tensor(sparse.layers_to_reach(seq_len, int(windows[0])))  # 0-d int64
    return torch.tensor(_cumulative_reach(seq_len, windows))  # 0-d int64


def _reaches_back(seq_len: int, windows: torch.Tensor, layers: int) -> int:
    """How far back the last token reads after ``layers`` layers: a product of the library's (T, T) masks."""
    reach = torch.eye(seq_len, dtype=torch.int64)  # (T, T): 0 layers, each output is its own input
    for layer in range(layers):
        window = int(windows[layer % len(windows)])
        mask = sparse.sliding_window_mask(seq_len, window=window)  # (T, T) bool, True = may attend
        reach = (reach @ mask.long()).clamp(max=1)  # (T, T): output t depends on input s
    return seq_len - 1 - int(reach[-1].nonzero()[0])  # the earliest input the last token depends on


def _composed_mask_agrees(case: Case, output: torch.Tensor) -> str | None:
    """Composing the library's masks ``output`` times reaches token 0 from the last token, one fewer does not."""
    seq_len, windows = case.args
    layers, needed = int(output), seq_len - 1
    if layers < -1:
        return f"the answer is {layers}: a layer count is 0 or more, or -1 for never"
    if layers == -1:  # a round of the pattern that reaches nothing new never will: seq_len rounds suffice
        ever = _reaches_back(seq_len, windows, seq_len * len(windows)) == needed
        return (
            f"the answer says -1 (never), but {seq_len * len(windows)} layers reach token 0" if ever else None
        )
    after = _reaches_back(seq_len, windows, layers)
    if after < needed:
        return f"after {layers} layers of the masks the last token reads {after} back, token 0 is {needed}"
    if layers and _reaches_back(seq_len, windows, layers - 1) >= needed:
        return f"{layers - 1} layers of the masks already reach token 0, {needed} positions back"
    return None


LAYERS_TO_REACH = Exercise(
    exercise_id="11.5",
    kind="measure",
    title="measure how many stacked causal sliding-window layers, windows cycling through a pattern, let the last "
    "token depend on token 0",
    function_name="layers_to_reach",
    arg_names=("seq_len", "windows"),
    reference=_layers_reference,
    make_cases=_reach_cases,
    mistakes=(
        Mistake(
            lambda seq_len, windows: torch.tensor(_cumulative_reach(seq_len, windows, step=0)),
            "each layer carries information window - 1 positions back, not window: the window of 11.1 counts "
            "the query's own token (keys p - window + 1 .. p). Build each layer's mask as 11.1 does and follow "
            "it, rather than counting steps by hand.",
        ),
        Mistake(
            lambda seq_len, windows: torch.tensor(sparse.layers_to_reach(seq_len, int(windows[0]))),
            "every layer got the first window of the pattern: layer i uses windows[i % len(windows)], so a "
            "full causal layer in the pattern carries information all the way back at once.",
        ),
        Mistake(
            lambda seq_len, windows: torch.tensor(max(_cumulative_reach(seq_len, windows) - 1, -1)),
            "one layer short: that counts the layers before the one that reaches token 0. Count a layer once "
            "it has been applied, and stop as soon as token 0 is among the tokens the last one depends on.",
        ),
        Mistake(
            lambda seq_len, windows: torch.tensor(_cumulative_reach(seq_len, windows, target=seq_len)),
            "one layer too many where the last step lands exactly on token 0: token 0 is seq_len - 1 "
            "positions before the last token, not seq_len. Stop at the first layer whose reach includes it.",
        ),
        Mistake(
            lambda seq_len, windows: torch.tensor(0 if seq_len == 1 else -1),
            "the reach never grows: the information was followed forwards in time. Row p of a causal mask lists "
            "the keys query p reads, all at or before p; start from the last token and take, layer by layer, "
            "every token that a token already reached reads.",
        ),
    ),
    properties=(
        Property(
            REACHABILITY,
            "after L layers the last token depends on token 0 when the product of the L layers' "
            "sliding-window masks (seq_len keys, windows cycling through the pattern) is True in its last row, "
            "first column: the answer is the smallest such L (0 when seq_len is 1, -1 when none reaches).",
            holds=_composed_mask_agrees,
        ),
    ),
    hints=(
        "keep the set of tokens the last token's output depends on so far (at first only itself); a layer adds "
        "every token that one of them reads through its window. Count layers until token 0 is in the set.",
        "as a boolean vector over the seq_len positions: one layer of the (T, T) mask of 11.1 takes it to the "
        "tokens its members read (a vector-matrix product, then > 0). The layer's window is "
        "windows[layer % len(windows)]. If a whole round of the pattern adds nothing, token 0 is never reached.",
        "a sketch: a bool vector of seq_len entries, True at the last one only; per layer, the (T, T) mask of "
        "11.1 for that layer's window, and the vector as floats times the mask as floats, then > 0, as the new "
        "vector; stop when entry 0 is True and wrap the layer count in torch.tensor; after a whole round of the "
        "pattern that changed nothing, the answer is torch.tensor(-1).",
    ),
    difficulty=3,
    minutes=40,
)


# ---------------------------------------------------------------------------------------------------------
# 11.7 top-k selection under a causal mask (what DeepSeek-V3.2's indexer feeds its attention)


def _topk_cases(g: torch.Generator) -> list[Case]:
    scores = lambda *shape: _randn(g, *shape)  # noqa: E731
    return [
        Case((scores(1, 6, 6), 3)),  # the first queries see fewer than k keys
        Case((scores(2, 5, 9), 4)),  # T < S: a cache of 4 earlier keys, bottom-right
        Case((scores(2, 3, 7, 7), 2)),  # (B, H, T, S)
        Case((scores(1, 4, 4), 8)),  # k larger than every row: all visible keys
        Case((scores(1, 8, 8) * 100.0, 1)),  # large scores: k = 1 keeps the largest visible one
    ]


def _topk_reference(scores: torch.Tensor, k: int) -> torch.Tensor:
    from attn_edu.selection import topk_mask

    return topk_mask(scores, k)


def _topk_variant(
    scores: torch.Tensor,
    k: int,
    *,
    causal: str = "bottom-right",
    diagonal: bool = True,
    keep_visible: bool = False,
) -> torch.Tensor:
    T, S = scores.shape[-2:]
    visible = torch.ones(T, S, dtype=torch.bool)  # (T, S): causal="none"
    if causal != "none":
        shift = (S - T) if causal == "bottom-right" else 0  # top-left: query t at position t
        visible = visible.tril(shift if diagonal else shift - 1)
    chosen = scores.masked_fill(~visible, -torch.inf).topk(min(k, S), dim=-1).indices  # (..., T, k)
    keep = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, chosen, True)  # (..., T, S)
    return keep & visible if keep_visible else keep


TOPK_CAUSAL = Exercise(
    exercise_id="11.7",
    title="each query's k highest-scoring keys among those it may see (causal, bottom-right): a bool mask",
    function_name="topk_causal_mask",
    arg_names=("scores", "k"),
    reference=_topk_reference,
    make_cases=_topk_cases,
    mistakes=(
        Mistake(
            lambda scores, k: _topk_variant(scores, k, causal="none"),
            "future keys get selected: mask the keys after each query to -inf before taking the top k, so only "
            "visible keys can win.",
        ),
        Mistake(
            lambda scores, k: _topk_variant(scores, k),
            "a query that sees fewer than k keys also gets some future keys: topk returns k indices even when "
            "some of them hold -inf. Keep a key only if it was selected *and* is visible.",
        ),
        Mistake(
            lambda scores, k: _topk_variant(scores, k, causal="top-left", keep_visible=True),
            "with a cache (T < S) query t sits at position S − T + t: align the causal mask "
            "bottom-right, as in notebook 04, not top-left.",
        ),
        Mistake(
            lambda scores, k: _topk_variant(scores, k, diagonal=False, keep_visible=True),
            "each query's own key is left out: a causal query may attend to itself (key s <= its position).",
        ),
    ),
    hints=(
        "two steps: hide what a query may not see, then take each row's k best; the answer is a bool (.., T, S) "
        "mask, True where a key is kept.",
        "the visible keys form a lower triangle shifted right by S - T (bottom-right, as in notebook "
        "04); give the others a score of -inf, take each row's min(k, S) best keys, and mark them True "
        "in a mask of False.",
        "a sketch: hidden = scores.masked_fill(~causal, float('-inf')); index = hidden.topk(min(k, S), "
        "dim=-1).indices; scatter True into a mask of zeros; a row with fewer than k visible keys gets "
        "-inf keys among its top k: AND the result with the causal mask at the end.",
    ),
    difficulty=2,
    minutes=15,
)


EXERCISES = (
    SLIDING_WINDOW,
    LINEAR_PARALLEL,
    LINEAR_RECURRENT,
    TOP_K_ROUTER,
    LAYERS_TO_REACH,
    TOPK_CAUSAL,
)
