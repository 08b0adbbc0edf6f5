"""Pre-training objectives: what each architecture is asked to predict.

- **BERT** (encoder): masked language modelling. Hide ~15% of the tokens and predict them from both
  sides (Devlin et al., 2019, section 3.1).
- **GPT** (decoder): causal language modelling. Predict every next token from the ones before it
  (Radford et al., 2018/2019): the targets are the inputs shifted left by one.
- **T5** (encoder-decoder): span corruption. Replace random spans with sentinel tokens in the
  encoder input; the decoder writes out the missing spans (Raffel et al., 2020, section 3.1.4).

Labels follow the PyTorch / Hugging Face convention: ``-100`` marks a position that is not scored.

Shapes:
    input_ids ``(B, T)`` integer token ids; logits ``(B, T, V)``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

from attn_edu._validate import check_floating, check_positive_int, check_same_shape, check_shape, check_tensor

IGNORE_INDEX = -100  # label of positions the loss skips (torch's cross_entropy default)


def _check_ids(name: str, ids: torch.Tensor) -> None:
    check_tensor(name, ids)
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"{name}: expected integer token ids, got dtype {ids.dtype}")


def _check_prob(name: str, p: float) -> float:
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: expected a probability in [0, 1], got {p!r}")
    return float(p)


def mlm_mask(
    input_ids: torch.Tensor,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_ids: Iterable[int] = (),
    mask_prob: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: pick ~15% of the tokens; of those 80% → ``[MASK]``, 10% → random, 10% unchanged.

    From Devlin et al. (2019), section 3.1 and appendix C.2: the model must predict each picked token.
    Hiding it behind ``[MASK]`` only would teach the encoder that real tokens never need predicting
    (``[MASK]`` never appears at fine-tuning time); the random 10% and the unchanged 10% keep it honest
    about every position. Special tokens (``[CLS]``, ``[SEP]``, padding: ``special_ids``) are never picked.

    Each token is picked independently with probability ``mask_prob`` (as Hugging Face's
    ``DataCollatorForLanguageModeling`` does; the original code picked exactly ``round(0.15·T)`` per
    sequence). A random replacement is uniform over the whole vocabulary, as in both.

    Shapes:
        input_ids ``(B, T)`` (any shape works); returns inputs and labels of the same shape, labels
        holding the original id at picked positions and ``-100`` elsewhere.

    Example:
        >>> ids = torch.tensor([[101, 7, 8, 9, 102]])
        >>> g = torch.Generator().manual_seed(0)
        >>> inputs, labels = mlm_mask(ids, mask_token_id=103, vocab_size=200, special_ids=(101, 102),
        ...                           mask_prob=0.5, generator=g)
        >>> bool(((labels == -100) | (labels == ids)).all()), labels[0, 0].item()   # CLS never picked
        (True, -100)
    """
    _check_ids("input_ids", input_ids)
    check_positive_int("vocab_size", vocab_size)
    _check_prob("mask_prob", mask_prob)
    if not 0 <= mask_token_id < vocab_size:
        raise ValueError(
            f"mask_token_id: expected an id in [0, vocab_size={vocab_size}), got {mask_token_id}"
        )

    u = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)  # one draw per token
    random_ids = torch.randint(
        vocab_size, input_ids.shape, generator=generator, dtype=input_ids.dtype, device=input_ids.device
    )
    return mlm_rule(
        input_ids, u, random_ids, mask_token_id=mask_token_id, special_ids=special_ids, mask_prob=mask_prob
    )


def mlm_rule(
    input_ids: torch.Tensor,
    u: torch.Tensor,
    random_ids: torch.Tensor,
    *,
    mask_token_id: int,
    special_ids: Iterable[int] | torch.Tensor = (),
    mask_prob: float = 0.15,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The 80/10/10 rule with the random numbers given: :func:`mlm_mask` without its dice.

    One uniform number ``u`` per token decides everything. A plain (not special) token is picked when
    ``u < p`` (``p = mask_prob``); a picked token becomes ``[MASK]`` when ``u < 0.8 p``, becomes its
    ``random_ids`` entry when ``0.8 p <= u < 0.9 p``, and stays itself otherwise. Since ``u`` is uniform,
    that is 15% picked and 80/10/10 among the picked, as Devlin et al. (2019) prescribe.

    Shapes:
        input_ids, u, random_ids: the same shape, e.g. ``(B, T)``; returns inputs and labels of that
        shape, labels holding the original id at picked positions and ``-100`` elsewhere.

    Example:
        >>> ids = torch.tensor([[101, 7, 8, 9, 10]])
        >>> u = torch.tensor([[0.01, 0.05, 0.125, 0.14, 0.5]])   # [CLS], then one token per band
        >>> inputs, labels = mlm_rule(ids, u, torch.full_like(ids, 42), mask_token_id=103, special_ids=(101,))
        >>> inputs.tolist(), labels.tolist()
        ([[101, 103, 42, 9, 10]], [[-100, 7, 8, 9, -100]])
    """
    _check_ids("input_ids", input_ids)
    check_floating("u", u)
    check_same_shape("u", u, "input_ids", input_ids)
    check_same_shape("random_ids", random_ids, "input_ids", input_ids)
    _check_prob("mask_prob", mask_prob)
    specials = torch.as_tensor(
        sorted(set(special_ids.tolist() if isinstance(special_ids, torch.Tensor) else special_ids)),
        dtype=input_ids.dtype,
        device=input_ids.device,
    )
    picked = (u < mask_prob) & ~torch.isin(input_ids, specials)  # same shape as input_ids
    to_mask = picked & (u < 0.8 * mask_prob)
    to_random = picked & ~to_mask & (u < 0.9 * mask_prob)
    inputs = input_ids.masked_fill(to_mask, mask_token_id)
    inputs = torch.where(to_random, random_ids.to(input_ids.dtype), inputs)
    labels = input_ids.masked_fill(~picked, IGNORE_INDEX)
    return inputs, labels


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on the picked positions only (labels ``-100`` elsewhere), averaged over them.

    Shapes:
        logits ``(B, T, V)``, labels ``(B, T)``; returns a scalar.

    Example:
        >>> logits = torch.zeros(1, 3, 4)                      # uniform over V = 4
        >>> round(mlm_loss(logits, torch.tensor([[-100, 2, -100]])).item(), 4)   # log 4
        1.3863
    """
    check_floating("logits", logits)
    sizes = check_shape("logits", logits, "B T V")
    check_shape("labels", labels, "B T", B=sizes["B"], T=sizes["T"])
    _check_ids("labels", labels)
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)


def causal_lm_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy: position ``t`` is scored on token ``t + 1``.

        L = −(1/N) Σ_t log p(x_{t+1} | x_{≤t})

    The logits at the last position and the label at the first have no partner and are dropped.
    ``input_ids`` may hold ``-100`` at positions that should not be predicted (a prompt, padding):
    pass the labels, as Hugging Face's ``labels=`` does.

    Shapes:
        logits ``(B, T, V)``, input_ids ``(B, T)``; returns a scalar.

    Example:
        >>> logits = torch.zeros(2, 5, 10)                     # uniform: loss = log 10
        >>> round(causal_lm_loss(logits, torch.randint(10, (2, 5))).item(), 4)
        2.3026
    """
    check_floating("logits", logits)
    sizes = check_shape("logits", logits, "B T V")
    check_shape("input_ids", input_ids, "B T", B=sizes["B"], T=sizes["T"])
    _check_ids("input_ids", input_ids)
    predictions = logits[:, :-1]  # (B, T-1, V): what each position says about the next token
    targets = input_ids[:, 1:]  # (B, T-1)
    return F.cross_entropy(predictions.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE_INDEX)


def _random_partition(total: int, parts: int, generator: torch.Generator | None) -> torch.Tensor:
    """Split ``total`` items into ``parts`` positive lengths, uniformly over all such splits.

    Choose ``parts - 1`` distinct cut points among the ``total - 1`` gaps (stars and bars).
    """
    cuts = torch.randperm(total - 1, generator=generator)[: parts - 1] + 1  # (parts-1,)
    edges = torch.cat([torch.tensor([0]), cuts.sort().values, torch.tensor([total])])  # (parts+1,)
    return edges.diff()  # (parts,)


def _span_counts(length: int, noise_density: float, mean_span_length: float) -> tuple[int, int]:
    """Noise tokens and spans for ``length`` tokens: at least one of each, and one clean token."""
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = min(max(round(num_noise / mean_span_length), 1), num_noise, length - num_noise)
    return num_noise, num_spans


def span_noise_mask(
    length: int,
    *,
    noise_density: float = 0.15,
    mean_span_length: float = 3.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Which of ``length`` tokens to corrupt, in spans, as T5 does (Raffel et al., 2020, section 3.1.4).

    ``round(length × noise_density)`` tokens are noise, cut into ``round(noise / mean_span_length)``
    spans; the noise and the clean tokens are each split at random into that many runs, and the runs
    alternate starting with clean tokens. So the counts are exact and only the span boundaries are random.

    Shapes:
        returns ``(T,)`` bool with ``T = length``, ``True`` = noise.

    Example:
        >>> m = span_noise_mask(20, generator=torch.Generator().manual_seed(0))
        >>> int(m.sum()), bool(m[0])          # round(0.15 × 20) noise tokens; a clean token first
        (3, False)
    """
    check_positive_int("length", length)
    _check_prob("noise_density", noise_density)
    if not isinstance(mean_span_length, (int, float)) or mean_span_length < 1:
        raise ValueError(f"mean_span_length: expected a number >= 1, got {mean_span_length!r}")
    if length < 2:
        raise ValueError(f"length: expected at least 2 tokens to corrupt a span, got {length}")
    num_noise, num_spans = _span_counts(length, noise_density, mean_span_length)
    noise_lengths = _random_partition(num_noise, num_spans, generator)  # (spans,)
    clean_lengths = _random_partition(length - num_noise, num_spans, generator)  # (spans,)
    runs = torch.stack([clean_lengths, noise_lengths], dim=1).flatten()  # (2·spans,): clean, noise, ...
    is_noise = torch.tensor([False, True]).repeat(num_spans)  # (2·spans,)
    return is_noise.repeat_interleave(runs)  # (T,)


def replace_spans_with_sentinels(
    tokens: torch.Tensor, hide: torch.Tensor, sentinel_start_id: int
) -> torch.Tensor:
    """Replace each run of hidden tokens by one sentinel, counting down from ``sentinel_start_id``.

    The k-th run (k = 0, 1, ...) becomes ``sentinel_start_id - k``, i.e. ``<extra_id_k>``. With
    ``hide = noise`` this builds T5's encoder input; with ``hide = ~noise`` its decoder target.

    Shapes:
        tokens, hide ``(T,)``; returns ``(T - hidden + runs,)``.

    Example:
        >>> tokens = torch.tensor([10, 11, 12, 13, 14, 15])
        >>> hide = torch.tensor([False, True, True, False, True, False])
        >>> replace_spans_with_sentinels(tokens, hide, 99).tolist()
        [10, 99, 13, 98, 15]
    """
    _check_ids("tokens", tokens)
    T = check_shape("tokens", tokens, "T")["T"]
    check_shape("hide", hide, "T", T=T)
    if hide.dtype != torch.bool:
        raise ValueError(f"hide: expected a bool tensor (True = hidden), got dtype {hide.dtype}")
    starts = hide & ~torch.cat([hide.new_zeros(1), hide[:-1]])  # (T,) first token of each run
    sentinels = sentinel_start_id + 1 - starts.long().cumsum(0)  # (T,) run k gets start_id - k
    out = torch.where(starts, sentinels.to(tokens.dtype), tokens)  # (T,)
    return out[~hide | starts]


def span_corruption(
    tokens: torch.Tensor,
    *,
    noise_density: float = 0.15,
    mean_span_length: float = 3.0,
    sentinel_start_id: int,
    num_sentinels: int = 100,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """T5's span corruption: spans → sentinels in the input; the target lists the spans after them.

    Original  ``Thank you for inviting me to your party last week .``
    Inputs    ``Thank you <X> me to your party <Y> week .``
    Targets   ``<X> for inviting <Y> last <Z>``        (Raffel et al., 2020, figure 2)

    Sentinels are ``<extra_id_0>, <extra_id_1>, ...`` = ``sentinel_start_id, sentinel_start_id − 1, ...``
    (Hugging Face's T5 tokenizer puts them at the end of the vocabulary, counting down, so
    ``sentinel_start_id = vocab_size − 1``; T5 has ``num_sentinels = 100``, and token ids in that range
    are refused). The mask comes from :func:`span_noise_mask`: it starts with clean tokens and ends
    with a noise span, so the targets end with a span, not a sentinel (T5's code, which the paper's
    figure simplifies). No EOS is appended.

    Shapes:
        tokens ``(T,)``; returns inputs ``(T − noise + spans,)`` and targets ``(noise + spans,)``.

    Example:
        >>> tokens = torch.arange(10, 30)
        >>> inputs, targets = span_corruption(tokens, sentinel_start_id=199,
        ...                                   generator=torch.Generator().manual_seed(1))
        >>> torch.equal(span_uncorrupt(inputs, targets, sentinel_start_id=199), tokens)
        True
    """
    _check_ids("tokens", tokens)
    check_shape("tokens", tokens, "T")
    check_positive_int("num_sentinels", num_sentinels)
    sentinel_ids = torch.arange(sentinel_start_id - num_sentinels + 1, sentinel_start_id + 1)
    if torch.isin(tokens, sentinel_ids.to(tokens.device)).any():
        raise ValueError(
            f"tokens: contain ids in the sentinel range {sentinel_start_id - num_sentinels + 1}.."
            f"{sentinel_start_id}; the corrupted text would be ambiguous"
        )
    noise = span_noise_mask(
        len(tokens), noise_density=noise_density, mean_span_length=mean_span_length, generator=generator
    ).to(tokens.device)  # (T,)
    num_spans = int((noise & ~torch.cat([noise.new_zeros(1), noise[:-1]])).sum())
    if num_spans > num_sentinels:
        raise ValueError(f"tokens: {num_spans} spans need more than num_sentinels={num_sentinels} sentinels")
    inputs = replace_spans_with_sentinels(
        tokens, noise, sentinel_start_id
    )  # clean tokens, a sentinel per span
    targets = replace_spans_with_sentinels(
        tokens, ~noise, sentinel_start_id
    )  # a sentinel per clean run, the spans
    return inputs, targets


def span_uncorrupt(
    inputs: torch.Tensor, targets: torch.Tensor, *, sentinel_start_id: int, num_sentinels: int = 100
) -> torch.Tensor:
    """Undo :func:`span_corruption`: put each target span back where its sentinel sits in the input.

    Ids ``sentinel_start_id − num_sentinels + 1 .. sentinel_start_id`` count as sentinels (T5 has 100).

    Shapes:
        inputs ``(T_in,)``, targets ``(T_out,)``; returns the original ``(T,)``.
    """
    check_shape("inputs", inputs, "T")
    check_shape("targets", targets, "T")
    check_positive_int("num_sentinels", num_sentinels)

    def is_sentinel(token: int) -> bool:
        return sentinel_start_id - num_sentinels < token <= sentinel_start_id

    # The targets read "<s0> span0 <s1> span1 ...": collect the tokens after each sentinel.
    spans: dict[int, list[int]] = {}
    current: list[int] | None = None
    for token in targets.tolist():
        if is_sentinel(token):
            current = spans.setdefault(token, [])
        elif current is not None:
            current.append(token)

    out: list[int] = []
    for token in inputs.tolist():
        if not is_sentinel(token):
            out.append(token)
        elif token in spans:
            out.extend(spans[token])
        else:
            raise ValueError(f"targets: no span follows sentinel {token}, which the inputs use")
    return torch.tensor(out, dtype=inputs.dtype, device=inputs.device)
