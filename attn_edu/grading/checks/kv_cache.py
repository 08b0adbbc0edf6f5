"""Checks for notebook 10's exercises: a KV-cache append, the cache-size formula, top-k and top-p sampling.

The references are :class:`attn_edu.kv_cache.KVCacheLayer`, :func:`attn_edu.kv_cache.kv_cache_bytes`,
:func:`attn_edu.generation.top_k_filter` and :func:`attn_edu.generation.top_p_filter`. The known-wrong
versions below are the usual slips: concatenating along the wrong dimension or overwriting the cache,
forgetting that K *and* V are stored or counting query heads instead of key/value heads, keeping one
token too many, renormalising over the whole vocabulary, dropping the token that crosses ``p``, sorting
the wrong way round, and a softmax that does not subtract the row's largest logit (one case's rows reach 120).

The decoding step (10.5) is graded against :class:`attn_edu.multihead.MultiHeadAttention` (no biases) run with
a :class:`attn_edu.kv_cache.KVCacheLayer` holding the given cache; each case's cache is the projection of a
real prefix, so the step must equal the last row of the causal forward over all ``S + 1`` tokens. Its
known-wrong versions: the new token left out of the cache, a top-left causal mask that lets the one query see
key 0 only, the scale ``1/sqrt(C)``, and weights used untransposed.
10.6 measures, on a given tiny model (:func:`attn_edu.grading.given.tiny_lm`, float32 or bfloat16), the cached
length at which its KV cache takes as many bytes as its weights; the reference counts with
:func:`attn_edu.params.count_parameters` and :func:`attn_edu.kv_cache.kv_cache_bytes`, and the property runs the
model on S and S - 1 tokens and adds up the bytes its cache holds against the bytes of its stored tensors.
10.7, StreamingLLM's eviction, is graded against :class:`attn_edu.kv_cache.StreamingKVCacheLayer`; its slips: the
sinks dropped, the sinks and the window overlapping on a short text, the oldest tokens kept instead of the newest,
and a window that counts the sinks.
"""

from __future__ import annotations

import math

import torch

from attn_edu.generation import top_k_filter, top_p_filter
from attn_edu.grading.exercise import (
    OVERFLOW_HINT,
    Case,
    Exercise,
    Mistake,
    Property,
    lifted,
    overflow_diagnosis,
    unshifted_softmax,
)
from attn_edu.grading.given import TINY_LM_MAX_LEN, TinyLM, tiny_lm
from attn_edu.kv_cache import MODEL_SHAPES, KVCacheLayer, StreamingKVCacheLayer, kv_cache_bytes
from attn_edu.multihead import MultiHeadAttention, merge_heads, split_heads
from attn_edu.params import count_parameters

# ---------------------------------------------------------------------------------------------------------
# 10.1 append new keys (or values) to a layer's cache


def _append_cases(g: torch.Generator) -> list[Case]:
    # The cache and the new chunk hold the same number of tokens (S == T) in every case, so that a
    # concatenation along the wrong dimension still runs and the check can name it; with S != T torch
    # refuses, and its error message already names the dimension.
    def pair(B: int, H_kv: int, S: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(B, H_kv, S, D, generator=g), torch.randn(B, H_kv, S, D, generator=g)

    S = int(torch.randint(2, 9, (1,), generator=g))
    return [
        Case(pair(1, 3, 1, 6)),  # one cached token, one new token (the second decoding step)
        Case(pair(2, 5, 4, 10)),
        Case(pair(3, 1, 2, 7)),  # multi-query attention: a single kv head
        Case(pair(2, 3, S, 12)),
    ]


def _append_reference(cache: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    layer = KVCacheLayer()
    layer.update(cache, cache)  # the tokens already stored
    k_all, _ = layer.update(new, new)  # (B, H_kv, S + T, D)
    return k_all


APPEND = Exercise(
    exercise_id="10.1",
    title="append the new tokens' keys (B, H_kv, T, D) to a layer's cache (B, H_kv, S, D)",
    function_name="append_to_cache",
    arg_names=("cache", "new"),
    reference=_append_reference,
    make_cases=_append_cases,
    mistakes=(
        Mistake(
            lambda cache, new: torch.cat([cache, new], dim=1),
            "concatenated along dim 1, the kv heads: the cache would gain heads, not tokens. Tokens run "
            "along dim 2 (S) of (B, H_kv, S, D).",
        ),
        Mistake(
            lambda cache, new: torch.cat([cache, new], dim=-1),
            "concatenated along the last dim, the head dim D: every key would get longer, not the cache. "
            "Tokens run along dim 2 (S).",
        ),
        Mistake(
            lambda cache, new: torch.cat([cache, new], dim=0),
            "concatenated along dim 0, the batch: that adds sequences, not tokens. Tokens run along dim "
            "2 (S).",
        ),
        Mistake(
            lambda cache, new: new,
            "only the new tokens come back: they overwrote the cache, and every earlier token is "
            "forgotten. Append instead: the result holds S + T tokens, the old ones first.",
        ),
        Mistake(
            lambda cache, new: torch.cat([new, cache], dim=2),
            "the new tokens come first: the cache keeps positions in order, oldest first, so new tokens "
            "go at the end.",
        ),
    ),
    hints=(
        "the cache's shape is (B, H_kv, S, D): which dimension counts tokens?",
        "the result has shape (B, H_kv, S + T, D), the old tokens first, then the new ones.",
        "torch.cat joins a list of tensors along one dimension: list the cache before the new tokens, and "
        "pick the dimension that counts tokens (the same call serves keys and values).",
    ),
    difficulty=1,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 10.2 the cache-size formula


_NAMES = ("num_layers", "num_heads", "num_kv_heads", "seq_len", "head_dim", "batch_size", "dtype_bytes")


def _configs(rows: list[tuple[int, ...]]) -> tuple[torch.Tensor, ...]:
    """Seven int64 tensors of shape (N,), one per field of ``_NAMES``, one entry per configuration."""
    return tuple(torch.tensor(column, dtype=torch.int64) for column in zip(*rows))


def _bytes_cases(g: torch.Generator) -> list[Case]:
    def randint(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=g))

    def random_row() -> tuple[int, ...]:
        kv_heads = randint(1, 9)
        group = randint(1, 5)  # query heads per kv head
        return (
            randint(1, 40),
            kv_heads * group,
            kv_heads,
            randint(1, 5000),
            randint(3, 130),
            randint(1, 7),
            [1, 2, 4][randint(0, 2)],
        )

    real = []
    for name in ("Llama-2-7B", "Llama-3-8B", "Falcon-7B", "Llama-2-70B"):
        shape = MODEL_SHAPES[name]
        real.append(
            (shape["num_layers"], shape["num_heads"], shape["num_kv_heads"], 4096, shape["head_dim"], 1, 2)
        )
    return [
        Case(_configs(real)),  # real models at 4k tokens, batch 1, fp16
        Case(_configs([(2, 4, 2, 10, 16, 3, 4), (1, 1, 1, 1, 1, 1, 1), (3, 6, 6, 7, 5, 2, 2)])),
        Case(_configs([random_row() for _ in range(5)])),
        Case(_configs([random_row() for _ in range(3)])),
    ]


def _bytes_reference(*columns: torch.Tensor) -> torch.Tensor:
    rows = zip(*(c.tolist() for c in columns))
    sizes = [
        kv_cache_bytes(
            num_layers=L, num_kv_heads=H_kv, seq_len=S, head_dim=D, batch_size=B, dtype_bytes=nbytes
        )
        for L, _H, H_kv, S, D, B, nbytes in rows
    ]
    return torch.tensor(sizes, dtype=torch.int64)  # (N,)


BYTES = Exercise(
    exercise_id="10.2",
    title="the KV-cache size in bytes: layers × H_kv × S × D × 2 × bytes per number × B",
    function_name="kv_cache_size",
    arg_names=_NAMES,
    reference=_bytes_reference,
    make_cases=_bytes_cases,
    mistakes=(
        Mistake(
            lambda L, H, H_kv, S, D, B, nbytes: L * H_kv * S * D * nbytes * B,
            "half the size: the cache stores keys *and* values, two tensors per layer: multiply by 2.",
        ),
        Mistake(
            lambda L, H, H_kv, S, D, B, nbytes: L * H * S * D * 2 * nbytes * B,
            "num_heads counts the query heads; the cache stores only the key/value heads, "
            "num_kv_heads (fewer under GQA, one under MQA).",
        ),
        Mistake(
            lambda L, H, H_kv, S, D, B, nbytes: L * H_kv * S * D * 2 * nbytes,
            "the batch is missing: every sequence in the batch has its own cache: multiply by batch_size.",
        ),
        Mistake(
            lambda L, H, H_kv, S, D, B, nbytes: L * H_kv * S * D * 2 * nbytes * B / 2**30,
            "that is GiB; return the size in bytes (an int64 tensor) and divide by 2³⁰ only to print it.",
        ),
    ),
    hints=(
        "each layer stores a key tensor and a value tensor of shape (B, H_kv, S, D).",
        "one tensor holds B · H_kv · S · D numbers of dtype_bytes bytes each; there are 2 per layer.",
        "every argument is an (N,) int64 tensor, so plain * multiplies them entry by entry: the bytes of "
        "one tensor, times the tensors per layer, times the layers. num_heads is not needed.",
    ),
    difficulty=1,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 10.3 top-k sampling distribution


def _logits(g: torch.Generator, *shape: int, scale: float = 2.0) -> torch.Tensor:
    return scale * torch.randn(shape, generator=g)  # distinct values: no ties at the cut


def _top_k_cases(g: torch.Generator) -> list[Case]:
    V = int(torch.randint(9, 30, (1,), generator=g))
    return [
        Case((_logits(g, 7), 3)),  # (V,)
        Case((_logits(g, 2, 11), 1), {}),  # k = 1: greedy
        Case((_logits(g, 3, V), 5)),
        Case((_logits(g, 2, 3, 13), 4)),  # (B, T, V): any leading dims
        Case((_logits(g, 5), 5)),  # k = V keeps everything
        Case((lifted(_logits(g, 2, 9), 120.0), 4)),  # row 0 lifted to a largest logit of 120: exp overflows
    ]


def _top_k_reference(logits: torch.Tensor, k: int) -> torch.Tensor:
    return torch.softmax(top_k_filter(logits, k), dim=-1)  # (..., V)


def _keep_top(logits: torch.Tensor, k: int, *, largest: bool = True) -> torch.Tensor:
    k = min(k, logits.shape[-1])
    index = logits.topk(k, dim=-1, largest=largest).indices  # (..., k)
    return torch.zeros_like(logits, dtype=torch.bool).scatter(-1, index, True)  # (..., V)


def _unshifted_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    kept = logits.masked_fill(~_keep_top(logits, k), float("-inf"))  # (..., V)
    return unshifted_softmax(kept)  # (..., V), NaN past a logit of 88


TOP_K = Exercise(
    exercise_id="10.3",
    title="top-k sampling: the next-token probabilities when only the k most likely tokens may be drawn",
    function_name="top_k_probs",
    arg_names=("logits", "k"),
    reference=_top_k_reference,
    make_cases=_top_k_cases,
    mistakes=(
        Mistake(
            lambda logits, k: _top_k_reference(logits, min(k + 1, logits.shape[-1])),
            "k + 1 tokens keep some probability: keep exactly the k largest logits, the k-th largest "
            "included and nothing below it.",
        ),
        Mistake(
            lambda logits, k: torch.softmax(logits, dim=-1) * _keep_top(logits, k),
            "the kept probabilities do not sum to 1: they were computed by a softmax over all V "
            "tokens and then cut. Set the dropped logits to -inf first, then take the softmax.",
        ),
        Mistake(
            lambda logits, k: torch.softmax(
                logits.masked_fill(~_keep_top(logits, k, largest=False), -torch.inf), -1
            ),
            "the k *least* likely tokens are kept: the top k are the largest logits.",
        ),
        Mistake(_unshifted_top_k, OVERFLOW_HINT),
        Mistake(
            lambda logits, k: top_k_filter(logits, k),
            "these are filtered logits (with -inf), not probabilities: finish with a softmax over the last dim.",
        ),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_top_k, atol=1e-6),),
    hints=(
        "find the k-th largest logit of each row, drop every logit below it, then take the softmax.",
        "the k-th largest logit of each row is the threshold; every logit below it becomes -inf, so that "
        "the softmax gives it exactly 0 and renormalises over the k kept ones.",
        "a sketch: kth = logits.topk(k, dim=-1).values[..., -1:] has shape (..., 1), so comparing it "
        "with the (..., V) logits broadcasts over the row; drop only the logits strictly below it "
        "(masked_fill with float('-inf')), so that the k-th largest itself stays, then the softmax.",
    ),
    difficulty=2,
    minutes=10,
    atol=1e-6,
)


# ---------------------------------------------------------------------------------------------------------
# 10.4 top-p (nucleus) sampling distribution


def _top_p_cases(g: torch.Generator) -> list[Case]:
    peaked = _logits(g, 9, scale=1.0)
    peaked[4] = 8.0  # one token holds ~99 % of the mass: the nucleus is that token alone
    V = int(torch.randint(10, 40, (1,), generator=g))
    return [
        Case((_logits(g, 8), 0.5)),  # (V,)
        Case((_logits(g, 3, 12), 0.9)),  # (B, V)
        Case((_logits(g, 2, V), 0.75)),
        Case((_logits(g, 2, 2, 15, scale=1.0), 0.3)),  # (B, T, V), a flatter distribution
        Case((peaked, 0.6)),
        Case((lifted(_logits(g, 3, 10), 120.0), 0.9)),  # rows 0 and 2 lifted to at most 120: exp overflows
    ]


def _top_p_reference(logits: torch.Tensor, p: float) -> torch.Tensor:
    return torch.softmax(top_p_filter(logits, p), dim=-1)  # (..., V)


def _nucleus(
    logits: torch.Tensor, p: float, *, rule: str = "reference", descending: bool = True, softmax=torch.softmax
) -> torch.Tensor:
    """Which tokens a (possibly wrong) nucleus rule keeps, as a bool (..., V) in vocabulary order."""
    sorted_logits, order = logits.sort(dim=-1, descending=descending)  # (..., V)
    if rule == "unsorted":
        sorted_logits, order = logits, torch.arange(logits.shape[-1]).expand_as(logits)
    probs = softmax(sorted_logits, dim=-1)  # (..., V)
    mass_through = probs.cumsum(dim=-1)  # (..., V) mass of this token and those ranked above it
    if rule == "exclude_crossing":
        keep_sorted = mass_through <= p  # drops the token that takes the mass past p
    else:
        keep_sorted = mass_through - probs < p  # keeps it
    return keep_sorted.scatter(-1, order, keep_sorted)  # (..., V)


def _softmax_kept(logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits.masked_fill(~keep, float("-inf")), dim=-1)  # (..., V)


def _unshifted_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Top-p with one softmax of the learner's own, unshifted, used twice: for the running total (NaN there
    keeps no token) and for the final probabilities."""
    keep = _nucleus(logits, p, softmax=unshifted_softmax)  # (..., V)
    return unshifted_softmax(logits.masked_fill(~keep, float("-inf")))  # (..., V)


TOP_P = Exercise(
    exercise_id="10.4",
    title="top-p (nucleus) sampling: the probabilities when only the smallest set holding mass p may be drawn",
    function_name="top_p_probs",
    arg_names=("logits", "p"),
    reference=_top_p_reference,
    make_cases=_top_p_cases,
    mistakes=(
        Mistake(_unshifted_top_p, OVERFLOW_HINT),
        Mistake(
            lambda logits, p: unshifted_softmax(logits.masked_fill(~_nucleus(logits, p), float("-inf"))),
            OVERFLOW_HINT,
        ),
        Mistake(
            lambda logits, p: _softmax_kept(logits, _nucleus(logits, p, rule="exclude_crossing")),
            "the token whose probability takes the running total past p is dropped, so the kept mass is "
            "below p (and a row whose top token alone exceeds p keeps nothing). Keep a token while the "
            "mass ranked *above* it is still below p.",
        ),
        Mistake(
            lambda logits, p: _softmax_kept(logits, _nucleus(logits, p, descending=False)),
            "the tokens were sorted from least to most likely, so the nucleus collects the tail. Sort "
            "from most to least likely.",
        ),
        Mistake(
            lambda logits, p: _softmax_kept(logits, _nucleus(logits, p, rule="unsorted")),
            "the running total is taken in vocabulary order; sort the probabilities (most likely first) "
            "before the running total, then map the decision back to vocabulary order.",
        ),
        Mistake(
            lambda logits, p: torch.softmax(logits, dim=-1) * _nucleus(logits, p),
            "the kept probabilities do not sum to 1: renormalise over the nucleus (set the dropped "
            "logits to -inf, then softmax) rather than cutting the full softmax.",
        ),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_top_p, atol=1e-6),),
    hints=(
        "sort the probabilities from most to least likely and keep tokens until their running total "
        "reaches p; the token that reaches it stays in.",
        "with the probabilities sorted from most to least likely, a token stays when the mass ranked "
        "above it (the running total minus its own probability) is below p; that decision is made in "
        "sorted order and must be written back to vocabulary order with the sort's indices.",
        "a sketch: probs, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True); keep = "
        "probs.cumsum(-1) - probs < p; scatter writes each sorted decision back to its vocabulary index. "
        "Then, as in top-k, give the dropped tokens -inf and take the softmax of the original logits.",
    ),
    difficulty=3,
    minutes=20,
    atol=1e-6,
)


# ---------------------------------------------------------------------------------------------------------
# 10.5 one decoding step of a causal attention layer with a KV cache


def _decode_case(g: torch.Generator, B: int, S: int, C: int, H: int) -> Case:
    def weight() -> torch.Tensor:
        return torch.randn(C, C, generator=g) / math.sqrt(C)  # (out, in) like nn.Linear

    w_q, w_k, w_v, w_o = weight(), weight(), weight(), weight()
    prefix = torch.randn(B, S, C, generator=g)  # the tokens already decoded
    k_cache = split_heads(prefix @ w_k.T, H)  # (B, H, S, D): what the earlier steps stored
    v_cache = split_heads(prefix @ w_v.T, H)  # (B, H, S, D)
    x = torch.randn(B, 1, C, generator=g)  # the new token
    return Case((x, k_cache, v_cache, w_q, w_k, w_v, w_o, H))


def _decode_cases(g: torch.Generator) -> list[Case]:
    return [
        _decode_case(g, 2, 6, 12, 3),  # D = 4
        _decode_case(g, 1, 9, 15, 5),  # D = 3, five heads
        _decode_case(g, 3, 1, 14, 7),  # one cached token
        _decode_case(g, 2, 11, 18, 3),  # D = 6
    ]


def _decode_reference(x, k_cache, v_cache, w_q, w_k, w_v, w_o, num_heads):  # noqa: ANN001, ANN202
    C = x.shape[-1]
    layer = MultiHeadAttention(C, num_heads, bias=False)
    with torch.no_grad():
        for proj, w in [(layer.q_proj, w_q), (layer.k_proj, w_k), (layer.v_proj, w_v), (layer.out_proj, w_o)]:
            proj.weight.copy_(w)
        cache = KVCacheLayer()
        cache.update(k_cache, v_cache)  # the earlier steps
        return layer(x, is_causal=True, kv_cache=cache)  # (B, 1, C)


def _decode_variant(
    x, k_cache, v_cache, w_q, w_k, w_v, w_o, num_heads, *, append=True, first_key_only=False, scale_dim=None,
    transposed=False,
):  # fmt: skip
    """The decoding step with one known slip."""
    proj = (lambda t, w: t @ w) if transposed else (lambda t, w: t @ w.T)
    q = split_heads(proj(x, w_q), num_heads)  # (B, H, 1, D)
    k = split_heads(proj(x, w_k), num_heads)  # (B, H, 1, D)
    v = split_heads(proj(x, w_v), num_heads)  # (B, H, 1, D)
    if append:
        k, v = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)  # (B, H, S + 1, D)
    else:
        k, v = k_cache, v_cache  # (B, H, S, D): the new token is left out
    if first_key_only:
        k, v = k[:, :, :1], v[:, :, :1]  # top-left causal with one query: only key 0 is visible
    width = q.shape[-1] if scale_dim is None else scale_dim
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(width), dim=-1)  # (B, H, 1, S + 1)
    return proj(merge_heads(weights @ v), w_o)  # (B, 1, C)


DECODE_STEP = Exercise(
    exercise_id="10.5",
    kind="build",
    title="one decoding step with a KV cache: the new token attends to the cached keys and to itself",
    function_name="decode_step",
    arg_names=("x", "k_cache", "v_cache", "w_q", "w_k", "w_v", "w_o", "num_heads"),
    reference=_decode_reference,
    make_cases=_decode_cases,
    mistakes=(
        Mistake(
            lambda *a: _decode_variant(*a, append=False),
            "the new token does not see itself: project x to a key and a value too and append them to the "
            "cache (dim 2) before attending; the last row of a causal forward includes its own position.",
        ),
        Mistake(
            lambda *a: _decode_variant(*a, first_key_only=True),
            "only the first key is read: that is PyTorch's attention with is_causal and one query, whose "
            "mask is aligned top-left (query 0 sees key 0). The newest token sees every key: a single "
            "query needs no mask at all.",
        ),
        Mistake(
            lambda *a: _decode_variant(*a, scale_dim=a[0].shape[-1]),
            "the scores are divided by sqrt(C), the model width; each head compares D = C / H numbers, "
            "so divide by sqrt(D).",
        ),
        Mistake(
            lambda *a: _decode_variant(*a, transposed=True),
            "the weights are used untransposed: they follow a linear layer's layout, (out, in), so a "
            "projection multiplies by the transposed weight.",
        ),
    ),
    hints=(
        "the cache holds keys and values already split into heads; the new token needs its own query, "
        "key and value, projected the linear-layer way (by the transposed weight) and split the same way.",
        "the new key and value join the cache along the token axis; then the one query attends to all "
        "S + 1 keys. The newest token may see every one of them, so no mask is needed.",
        "scale the scores by 1 / sqrt(D), D = C / num_heads, take the softmax over the keys, merge the heads "
        "back to (B, 1, C) and apply w_o.",
    ),
    difficulty=3,
    minutes=25,
)


# ---------------------------------------------------------------------------------------------------------
# 10.6 when the cache outweighs the weights, measured on a given tiny model

_OVERTAKE_NAMES = ("num_layers", "num_heads", "head_dim", "batch_size", "dtype")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # the formats the given model comes in


def _overtake_model(num_layers: int, num_heads: int, head_dim: int, dtype: str) -> TinyLM:
    return tiny_lm(0, num_layers=num_layers, num_heads=num_heads, head_dim=head_dim, dtype=dtype)


def measured_cache_bytes(model: TinyLM, batch_size: int, seq_len: int) -> int:
    """Bytes of the keys and values the model's own cache holds after it has read ``seq_len`` tokens of
    ``batch_size`` sequences, added up as ``numel · element_size`` over every layer's tensors."""
    cache = model.new_cache()
    if seq_len > 0:
        model(torch.zeros(batch_size, seq_len, dtype=torch.long), cache, 0)  # (B, S, V)
    tensors = [t for layer in cache.layers for t in (layer.k, layer.v) if t is not None]
    return sum(t.numel() * t.element_size() for t in tensors)


def measured_weight_bytes(model: TinyLM) -> int:
    """Bytes of the model's weights, each stored tensor once (the tied embedding and output share one)."""
    stored = {p.data_ptr(): p.numel() * p.element_size() for p in model.state_dict(keep_vars=True).values()}
    return sum(stored.values())


def _overtake_holds(case: Case, output: torch.Tensor) -> str | None:
    num_layers, num_heads, head_dim, batch_size, dtype = case.args
    S = int(output.reshape(()))
    if not 1 <= S <= TINY_LM_MAX_LEN:
        return f"the answer S = {S} is not a cache length from 1 to {TINY_LM_MAX_LEN}, the model's positions"
    model = _overtake_model(num_layers, num_heads, head_dim, dtype)
    weights = measured_weight_bytes(model)
    for s, too_soon in ((S, False), (S - 1, True)):  # as large at S, and not yet at S - 1
        cache = measured_cache_bytes(model, batch_size, s)
        if (cache >= weights) == too_soon:
            verdict = f"already as many, so S = {S} is not the smallest" if too_soon else "fewer"
            return (
                f"after {s} tokens the model's cache holds {cache:,} bytes of keys and values, its weights "
                f"take {weights:,} bytes ({dtype}): {verdict}"
            )
    return None


def _overtake_reference(num_layers, num_heads, head_dim, batch_size, dtype):  # noqa: ANN001, ANN202
    model = _overtake_model(num_layers, num_heads, head_dim, dtype)
    nbytes = torch.empty((), dtype=DTYPES[dtype]).element_size()
    per_token = kv_cache_bytes(
        num_layers=num_layers,
        num_kv_heads=num_heads,
        seq_len=1,
        head_dim=head_dim,
        batch_size=batch_size,
        dtype_bytes=nbytes,
    )  # bytes of one more cached token, K and V in every layer, for the whole batch
    weights = count_parameters(model) * nbytes
    return torch.tensor(-(-weights // per_token))  # ceil: the first S with S · per_token >= weights


def _overtake_variant(L, H, D, B, dtype, *, kv=2, batch=True, weight_bytes=None, cache_bytes=None, tied=1):  # noqa: ANN001, ANN202
    """The crossing with one slip: ``kv`` tensors a layer, the batch, the bytes a weight or a cached number is
    counted at (``None``: the dtype's), the tied (V, C) matrix counted ``tied`` times."""
    model = _overtake_model(L, H, D, dtype)
    nbytes = torch.empty((), dtype=DTYPES[dtype]).element_size()
    shared = model.model.token_embedding.weight.numel()  # the matrix the output layer reuses
    weights = (count_parameters(model) + (tied - 1) * shared) * (
        nbytes if weight_bytes is None else weight_bytes
    )
    per_token = L * kv * H * D * (B if batch else 1) * (nbytes if cache_bytes is None else cache_bytes)
    return torch.tensor(-(-weights // per_token))


def _overtake_cases(g: torch.Generator) -> list[Case]:
    def rand(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=g))

    def random_case(group: str = "values") -> Case:
        dtype = ("float32", "bfloat16")[rand(0, 1)]
        return Case((rand(1, 3), rand(1, 3), rand(2, 8), rand(1, 6), dtype), group=group)

    measured = "measured on the model's cache"
    return [
        Case((2, 2, 8, 1, "float32")),
        Case((2, 2, 8, 4, "bfloat16")),  # a bf16 model: 2 bytes a weight and 2 a cached number
        Case((1, 3, 4, 2, "float32")),
        Case((3, 2, 6, 16, "bfloat16")),
        random_case(),
        random_case(measured),
        Case((1, 1, 4, 3, "bfloat16"), group=measured),
    ]


OVERTAKE = Exercise(
    exercise_id="10.6",
    title="measure the cached length S at which a tiny model's KV cache takes as many bytes as its weights",
    function_name="cache_overtakes_weights",
    arg_names=_OVERTAKE_NAMES,
    reference=_overtake_reference,
    make_cases=_overtake_cases,
    mistakes=(
        Mistake(
            lambda *a: _overtake_variant(*a, tied=2),
            "the token embedding is counted twice: the output layer reuses its matrix (weight tying), so the "
            "model stores it once. Count each parameter tensor once, as the model's parameters list them.",
        ),
        Mistake(
            lambda *a: _overtake_variant(*a, kv=1),
            "only the keys are counted; each layer caches a key *and* a value for every token and head.",
        ),
        Mistake(
            lambda *a: _overtake_variant(*a, batch=False),
            "the cache was filled for one sequence: every sequence of the batch has its own keys and values, "
            "so feed batch_size sequences at once.",
        ),
        Mistake(
            lambda *a: _overtake_variant(*a, weight_bytes=1),
            "the weights are counted in numbers, the cache in bytes: count the weights in bytes too, each "
            "tensor's number of elements times the bytes of one element.",
        ),
        Mistake(
            lambda *a: _overtake_variant(*a, weight_bytes=4),
            "the weights are counted at 4 bytes a number whatever their format: a bfloat16 weight takes 2. "
            "Ask each tensor for the size of its elements.",
        ),
        Mistake(
            lambda *a: _overtake_variant(*a, cache_bytes=4),
            "the cache is counted at 4 bytes a number whatever its format: a bfloat16 model caches bfloat16 "
            "keys and values, 2 bytes each. Ask each cached tensor for the size of its elements.",
        ),
    ),
    properties=(
        Property(
            "measured on the model's cache",
            "after S tokens the model's own cache must hold at least the bytes of its weights, and after S - 1 "
            "fewer, counted as numel · element_size of the tensors it holds.",
            holds=_overtake_holds,
        ),
    ),
    hints=(
        "measure both sides on the model itself: what its weights take in memory, and what its cache takes "
        "after it has read some tokens; then let the cache grow until it catches up.",
        "a tensor's bytes are its number of elements times the bytes of one element. The weights are the "
        "model's parameters (each tensor once); the cache holds a key and a value tensor per layer, "
        "cache.layers[i].k and .v. Feed batch_size sequences, and after the first call one token at a time.",
        "a sketch: the weights' bytes are the sum of p.numel() * p.element_size() over model.parameters(); take "
        "an empty cache from model.new_cache(); feed a (batch_size, 1) tensor of zeros (dtype torch.long) with "
        "start_pos S = 0, 1, 2, ..., and after each call add up the same product over every layer's .k and .v; "
        "stop at the first length whose bytes reach the weights', and wrap it in torch.tensor.",
    ),
    difficulty=3,
    minutes=30,
    kind="measure",
)


# ---------------------------------------------------------------------------------------------------------
# 10.7 StreamingLLM's eviction: keep the first n_sink tokens and the latest window


def _streaming_cases(g: torch.Generator) -> list[Case]:
    def randint(low: int, high: int) -> int:
        return int(torch.randint(low, high + 1, (1,), generator=g))

    def case(B: int, H_kv: int, S: int, D: int, n_sink: int, window: int) -> Case:
        return Case((torch.randn(B, H_kv, S, D, generator=g), n_sink, window))

    n_sink, window = randint(1, 4), randint(2, 6)
    return [
        case(1, 2, 12, 4, 4, 5),  # the text has outgrown the cache: 3 tokens leave
        case(2, 1, randint(13, 20), 6, n_sink, window),
        case(1, 3, 7, 5, 4, 3),  # exactly full: nothing leaves yet
        case(2, 2, 5, 3, 2, 6),  # a short text: nothing leaves
        case(1, 1, 9, 2, 0, 4),  # n_sink = 0: window attention
    ]


def _streaming_reference(cache: torch.Tensor, n_sink: int, window: int) -> torch.Tensor:
    """What :class:`StreamingKVCacheLayer` holds once the cache's last token has arrived."""
    layer = StreamingKVCacheLayer(n_sink, window)
    layer.update(cache[:, :, :-1], cache[:, :, :-1])  # every earlier token (a prompt is read whole)
    k_all, _ = layer.update(cache[:, :, -1:], cache[:, :, -1:])  # the step that evicts, then appends
    return k_all


STREAMING_KEEP = Exercise(
    exercise_id="10.7",
    title="StreamingLLM's cache: the first n_sink tokens and the latest window, in order",
    function_name="streaming_keep",
    arg_names=("cache", "n_sink", "window"),
    reference=_streaming_reference,
    make_cases=_streaming_cases,
    mistakes=(
        Mistake(
            lambda cache, n_sink, window: cache[:, :, -window:],
            "only the latest window is kept: the first tokens, where a trained model parks its spare "
            "attention (the sink), are gone, and the loss jumps once the text outgrows the window. Keep "
            "the first n_sink tokens in front.",
        ),
        Mistake(
            lambda cache, n_sink, window: torch.cat([cache[:, :, :n_sink], cache[:, :, -window:]], dim=2),
            "a short text comes back with tokens twice: while S <= n_sink + window nothing is evicted, and the "
            "sinks and the window overlap. Return the cache unchanged until it is longer than n_sink + window.",
        ),
        Mistake(
            lambda cache, n_sink, window: cache[:, :, : n_sink + window],
            "the oldest tokens stay and the newest leave: a cache for a text that keeps going must keep the "
            "latest window (the last tokens along S), beside the first n_sink.",
        ),
        Mistake(
            lambda cache, n_sink, window: (
                cache
                if cache.shape[2] <= window
                else torch.cat([cache[:, :, :n_sink], cache[:, :, cache.shape[2] - window + n_sink :]], dim=2)
            ),
            "the window counts the sinks too here, so the cache keeps n_sink tokens fewer than it may: it holds "
            "n_sink first tokens and, beside them, the latest window (n_sink + window in all).",
        ),
    ),
    hints=(
        "the cache holds S tokens along dim 2; nothing needs to leave while S <= n_sink + window.",
        "past that, the result is the first n_sink tokens followed by the last window tokens, both in their "
        "original order: n_sink + window tokens.",
        "slice dim 2 twice, cache[:, :, :n_sink] and cache[:, :, S - window:], and torch.cat them along dim 2.",
    ),
    difficulty=2,
    minutes=15,
)


EXERCISES = (APPEND, BYTES, TOP_K, TOP_P, DECODE_STEP, OVERTAKE, STREAMING_KEEP)
