"""Checks for notebook 10's measurement exercise (10.6): the cached length at which the KV cache takes as much
memory as the model's weights.

The cache holds ``num_layers × 2 (K and V) × batch_size × num_kv_heads × S × head_dim`` numbers, the weights
``num_params``; both are stored in ``bytes_per_number`` bytes, so the answer is the first ``S`` with
``cache bytes >= weight bytes``. The reference takes the bytes per cached token from
:func:`attn_edu.kv_cache.kv_cache_bytes`. The property does not use the formula: it fills a real
:class:`attn_edu.kv_cache.KVCache` with ``S`` and ``S - 1`` tokens and adds up ``numel · element_size`` of
every tensor it holds, against the bytes of the parameters of a tiny :class:`attn_edu.models.GPT` (counted
with :func:`attn_edu.params.count_parameters`) whose layers, heads and head size the cache shares.

The known-wrong versions: keys only (a factor 2), the batch forgotten, ``>`` for ``>=`` (one token too many
where the two sizes tie exactly), and the weights counted in parameters rather than bytes.
"""

from __future__ import annotations

import torch

from attn_edu.grading.exercise import Case, Exercise, Mistake, Property
from attn_edu.kv_cache import MODEL_SHAPES, KVCache, kv_cache_bytes
from attn_edu.models import GPT, GPTConfig
from attn_edu.params import count_parameters

_NAMES = ("num_layers", "num_kv_heads", "head_dim", "num_params", "batch_size", "bytes_per_number")
DTYPES = {1: torch.int8, 2: torch.bfloat16, 4: torch.float32, 8: torch.float64}  # a cache's number formats

# Parameters of the two named models, as attn_edu.params.llama_parameter_count counts them from their configs.
LLAMA_2_7B_PARAMS, LLAMA_3_8B_PARAMS = 6_738_415_616, 8_030_261_248


def measured_cache_bytes(
    num_layers: int, num_kv_heads: int, head_dim: int, batch_size: int, dtype: torch.dtype, seq_len: int
) -> int:
    """Bytes of the key and value tensors a :class:`KVCache` holds after a prompt of ``seq_len`` tokens,
    added up as ``numel · element_size`` over every layer's tensors."""
    cache = KVCache(num_layers)
    for layer in cache.layers if seq_len > 0 else []:
        k = torch.zeros(batch_size, num_kv_heads, seq_len, head_dim, dtype=dtype)  # (B, H_kv, S, D)
        layer.update(k, torch.zeros_like(k))
    tensors = [t for layer in cache.layers for t in (layer.k, layer.v) if t is not None]
    return sum(t.numel() * t.element_size() for t in tensors)


def _overtake_holds(case: Case, output: torch.Tensor) -> str | None:
    num_layers, num_kv_heads, head_dim, num_params, batch_size, nbytes = case.args
    S = int(output.reshape(()))
    if not 1 <= S <= 100_000:
        return f"the answer S = {S} is not a cache length from 1 to 100,000, where these cases cross"
    dtype = DTYPES[nbytes]
    weights = num_params * torch.empty((), dtype=dtype).element_size()  # every parameter in that format
    for s, too_soon in ((S, False), (S - 1, True)):  # as large at S, and not yet at S - 1
        cache = measured_cache_bytes(num_layers, num_kv_heads, head_dim, batch_size, dtype, s)
        if (cache >= weights) == too_soon:
            verdict = f"already as many, so S = {S} is not the smallest" if too_soon else "fewer"
            return (
                f"at S = {s} a real KVCache holds {cache:,} bytes of keys and values, the weights' "
                f"{num_params:,} parameters {weights:,} bytes ({dtype}): {verdict}"
            )
    return None


def _overtake_reference(num_layers, num_kv_heads, head_dim, num_params, batch_size, bytes_per_number):
    per_token = kv_cache_bytes(
        num_layers=num_layers,
        num_kv_heads=num_kv_heads,
        seq_len=1,
        head_dim=head_dim,
        batch_size=batch_size,
        dtype_bytes=bytes_per_number,
    )  # bytes of one more cached token, K and V in every layer, for the whole batch
    weights = num_params * bytes_per_number
    return torch.tensor(-(-weights // per_token))  # ceil: the first S with S · per_token >= weights


def _overtake_variant(L, H_kv, D, P, B, nbytes, *, kv=2, batch=True, weight_bytes=True, tie=False):
    per_token = L * kv * H_kv * D * (B if batch else 1) * nbytes  # bytes
    weights = P * (nbytes if weight_bytes else 1)
    return torch.tensor(weights // per_token + 1 if tie else -(-weights // per_token))


def _tiny_gpt(num_layers: int, num_heads: int, head_dim: int) -> int:
    """The parameters of a tiny GPT whose cache has these layers, heads and head size (built on meta)."""
    C = num_heads * head_dim
    with torch.device("meta"):
        return count_parameters(GPT(GPTConfig(40, 16, C, num_layers, num_heads, 4 * C)))


def _overtake_cases(g: torch.Generator) -> list[Case]:
    def rand(low: int, high: int) -> int:
        return int(torch.randint(low, high, (1,), generator=g))

    def tie(L: int, H_kv: int, D: int, B: int, nbytes: int) -> Case:  # weights = exactly k tokens of cache
        return Case((L, H_kv, D, rand(3, 900) * 2 * L * H_kv * D * B, B, nbytes))

    llama_2, llama_3 = MODEL_SHAPES["Llama-2-7B"], MODEL_SHAPES["Llama-3-8B"]
    L, H, D = (rand(1, 4), rand(1, 4), rand(2, 5))
    return [
        Case((llama_2["num_layers"], llama_2["num_kv_heads"], llama_2["head_dim"], LLAMA_2_7B_PARAMS, 1, 2)),
        Case((llama_2["num_layers"], llama_2["num_kv_heads"], llama_2["head_dim"], LLAMA_2_7B_PARAMS, 16, 2)),
        Case((llama_3["num_layers"], llama_3["num_kv_heads"], llama_3["head_dim"], LLAMA_3_8B_PARAMS, 1, 2)),
        tie(rand(1, 9), rand(1, 9), rand(3, 70), rand(1, 9), 4),
        tie(rand(1, 9), rand(1, 9), rand(3, 70), rand(2, 9), 2),
        Case((rand(1, 9), rand(1, 9), rand(3, 70), rand(10**4, 10**7), rand(1, 9), 1)),
        Case((L, H, D, _tiny_gpt(L, H, D), rand(1, 4), 4), group="measured on a real KVCache"),
        Case((2, 3, 2, _tiny_gpt(2, 3, 2), 1, 2), group="measured on a real KVCache"),
    ]


OVERTAKE = Exercise(
    exercise_id="10.6",
    title="the cached length S at which the KV cache takes as many bytes as the model's weights",
    function_name="cache_overtakes_weights",
    arg_names=_NAMES,
    reference=_overtake_reference,
    make_cases=_overtake_cases,
    mistakes=(
        Mistake(
            lambda *a: _overtake_variant(*a, kv=1),
            "that counts the keys only; each layer caches a key *and* a value per token and head: a factor 2.",
        ),
        Mistake(
            lambda *a: _overtake_variant(*a, batch=False),
            "the batch is missing: every sequence of the batch has its own keys and values, so one more "
            "token costs batch_size times the bytes of one sequence's token.",
        ),
        Mistake(
            lambda *a: _overtake_variant(*a, tie=True),
            "one token too many where the sizes tie exactly: the cache *reaches* the weights at the first S "
            "with cache bytes >= weight bytes (>=, not >): round the quotient up, do not add 1 to its floor.",
        ),
        Mistake(
            lambda *a: _overtake_variant(*a, weight_bytes=False),
            "the weights are counted in parameters, the cache in bytes: multiply num_params by "
            "bytes_per_number too (and notice that it then cancels).",
        ),
    ),
    properties=(
        Property(
            "measured on a real KVCache",
            "a KVCache holding S tokens must take at least the weights' bytes, and one holding S - 1 tokens "
            "fewer, counted as numel · element_size of its tensors.",
            holds=_overtake_holds,
        ),
    ),
    hints=(
        "one more cached token adds, in every layer, a key and a value of head_dim numbers per kv head and "
        "per sequence of the batch; the weights hold num_params numbers. Both use bytes_per_number bytes each.",
        "the cache of S tokens takes S times the bytes of one token; find the first S at which that reaches "
        "(>=) num_params · bytes_per_number.",
        "that S is the quotient of the weights' bytes by the bytes per token, rounded up: in integers, "
        "-(-a // b) rounds a / b up without floats; wrap it in torch.tensor.",
    ),
    difficulty=2,
    minutes=15,
    kind="measure",
)


EXERCISES = (OVERTAKE,)
QUESTIONS = ()
