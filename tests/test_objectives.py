"""Pre-training objectives: BERT's 80/10/10 masking, GPT's shifted loss (vs Hugging Face), T5 spans."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_edu.objectives import (
    causal_lm_loss,
    mlm_loss,
    mlm_mask,
    mlm_rule,
    replace_spans_with_sentinels,
    span_corruption,
    span_noise_mask,
    span_uncorrupt,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

MASK, CLS, SEP, PAD = 3, 1, 2, 0
SPECIALS = (PAD, CLS, SEP, MASK)


# ------------------------------------------------------------------------------------------- BERT MLM


def test_mlm_statistics_match_devlin_15_80_10_10():
    V = 1000
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, V, (400, 500), generator=g)
    ids[:, 0], ids[:, -1] = CLS, SEP
    ids[:50, -100:-1] = PAD  # some padding, which must never be picked
    inputs, labels = mlm_mask(ids, mask_token_id=MASK, vocab_size=V, special_ids=SPECIALS, generator=g)

    eligible = ~torch.isin(ids, torch.tensor(SPECIALS))
    picked = labels != -100
    assert not (picked & ~eligible).any(), "a special or padding token was picked"
    picked_fraction = picked.sum().item() / eligible.sum().item()
    assert abs(picked_fraction - 0.15) < 0.01, picked_fraction

    n = picked.sum().item()
    to_mask = (inputs == MASK) & picked
    unchanged = (inputs == ids) & picked
    to_random = picked & ~to_mask & ~unchanged
    # A random replacement equal to the original (probability 1/V) counts as unchanged: 0.1 + 0.1/V.
    for name, part, want in [
        ("mask", to_mask, 0.8),
        ("random", to_random, 0.1),
        ("unchanged", unchanged, 0.1),
    ]:
        share = part.sum().item() / n
        assert abs(share - want) < 0.01, f"{name}: {share:.4f} vs {want}"
    # Random replacements are spread over the vocabulary, not stuck on a few ids.
    assert inputs[to_random].unique().numel() > 0.5 * V


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(1, 4),
    T=st.integers(1, 30),
    p=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_mlm_properties(B, T, p, seed):
    g = torch.Generator().manual_seed(seed)
    V = 50
    ids = torch.randint(V, (B, T), generator=g)
    inputs, labels = mlm_mask(
        ids, mask_token_id=MASK, vocab_size=V, special_ids=SPECIALS, mask_prob=p, generator=g
    )
    assert inputs.shape == labels.shape == ids.shape and inputs.dtype == ids.dtype
    picked = labels != -100
    torch.testing.assert_close(labels[picked], ids[picked])  # labels hold the original token
    torch.testing.assert_close(inputs[~picked], ids[~picked])  # unpicked tokens are untouched
    assert not torch.isin(ids[picked], torch.tensor(SPECIALS)).any()
    assert ((inputs >= 0) & (inputs < V)).all()
    if p == 0.0:
        assert not picked.any()


def test_mlm_mask_is_reproducible_with_a_seed():
    ids = torch.randint(4, 100, (3, 40))
    a = mlm_mask(ids, mask_token_id=MASK, vocab_size=100, generator=torch.Generator().manual_seed(7))
    b = mlm_mask(ids, mask_token_id=MASK, vocab_size=100, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_mlm_mask_applies_mlm_rule_to_its_own_draws():
    # mlm_mask = mlm_rule on one uniform draw per token and one random id per token, in that order.
    ids = torch.randint(4, 50, (6, 9))
    ids[:, 0] = CLS
    seed = 11
    got = mlm_mask(
        ids,
        mask_token_id=MASK,
        vocab_size=50,
        special_ids=SPECIALS,
        generator=torch.Generator().manual_seed(seed),
    )
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(ids.shape, generator=g)
    random_ids = torch.randint(50, ids.shape, generator=g)
    want = mlm_rule(ids, u, random_ids, mask_token_id=MASK, special_ids=SPECIALS)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_mlm_rule_bands_by_loop():
    # Each token alone, by the paper's rule: picked below p, [MASK] below 0.8 p, random below 0.9 p.
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(4, 40, (5, 13), generator=g)
    ids[:, 0], ids[:, -1] = CLS, SEP
    u = torch.rand(ids.shape, generator=g) * 0.3
    random_ids = torch.randint(40, ids.shape, generator=g)
    inputs, labels = mlm_rule(
        ids, u, random_ids, mask_token_id=MASK, special_ids=torch.tensor(SPECIALS), mask_prob=0.2
    )
    for at in torch.cartesian_prod(torch.arange(5), torch.arange(13)).tolist():
        at = tuple(at)
        token, draw = int(ids[at]), float(u[at])
        picked = token not in SPECIALS and draw < 0.2
        assert int(labels[at]) == (token if picked else -100)
        want = MASK if picked and draw < 0.16 else int(random_ids[at]) if picked and draw < 0.18 else token
        assert int(inputs[at]) == want


def test_mlm_rule_errors():
    ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match=r"u: expected the shape of input_ids, \(1, 3\), got \(3,\)"):
        mlm_rule(ids, torch.rand(3), ids, mask_token_id=3)
    with pytest.raises(ValueError, match="u: expected a floating-point tensor"):
        mlm_rule(ids, ids, ids, mask_token_id=3)
    with pytest.raises(ValueError, match="random_ids: expected the shape of input_ids"):
        mlm_rule(ids, torch.rand(1, 3), ids[:, :2], mask_token_id=3)


def test_replace_spans_with_sentinels_by_loop():
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        tokens = torch.randint(10, 50, (17,), generator=g)
        hide = torch.rand(17, generator=g) < 0.4
        out, runs, previous = [], 0, False
        for token, hidden in zip(tokens.tolist(), hide.tolist()):
            if hidden and not previous:
                out.append(99 - runs)
                runs += 1
            elif not hidden:
                out.append(token)
            previous = hidden
        assert replace_spans_with_sentinels(tokens, hide, 99).tolist() == out
    with pytest.raises(ValueError, match="hide: expected a bool tensor"):
        replace_spans_with_sentinels(tokens, hide.long(), 99)
    with pytest.raises(ValueError, match="hide: expected shape"):
        replace_spans_with_sentinels(tokens, hide[:3], 99)


def test_mlm_loss_is_cross_entropy_on_picked_positions_only():
    logits = torch.randn(2, 6, 11)
    labels = torch.full((2, 6), -100)
    labels[0, 1], labels[1, 4], labels[1, 5] = 3, 7, 0
    log_probs = logits.log_softmax(-1)
    want = -(log_probs[0, 1, 3] + log_probs[1, 4, 7] + log_probs[1, 5, 0]) / 3
    torch.testing.assert_close(mlm_loss(logits, labels), want)


def test_mlm_errors():
    ids = torch.randint(10, (2, 5))
    with pytest.raises(ValueError, match="mask_token_id"):
        mlm_mask(ids, mask_token_id=10, vocab_size=10)
    with pytest.raises(ValueError, match="mask_prob"):
        mlm_mask(ids, mask_token_id=3, vocab_size=10, mask_prob=1.5)
    with pytest.raises(ValueError, match="input_ids"):
        mlm_mask(ids.float(), mask_token_id=3, vocab_size=10)
    with pytest.raises(ValueError, match=r"labels: expected shape \(B, T\)"):
        mlm_loss(torch.randn(2, 5, 10), torch.zeros(2, 4, dtype=torch.long))


# --------------------------------------------------------------------------------------- GPT causal LM


def test_causal_lm_loss_equals_hugging_face_gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=40, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(40, (3, 12))
    labels = ids.clone()
    labels[:, :4] = -100  # an unscored prompt, as Hugging Face allows
    with torch.no_grad():
        for target in (ids, labels):
            out = model(ids, labels=target)
            torch.testing.assert_close(causal_lm_loss(out.logits, target), out.loss)


def test_causal_lm_loss_scores_the_next_token():
    # Logits that put all mass on token (t + 1) at position t give zero loss; unshifted logits do not.
    ids = torch.tensor([[4, 1, 3, 2]])
    perfect = F.one_hot(torch.tensor([[1, 3, 2, 0]]), 5).float() * 100  # position t predicts ids[t+1]
    assert causal_lm_loss(perfect, ids) < 1e-6
    assert causal_lm_loss(F.one_hot(ids, 5).float() * 100, ids) > 10


def test_causal_lm_loss_errors():
    with pytest.raises(ValueError, match=r"input_ids: expected shape \(B, T\)"):
        causal_lm_loss(torch.randn(2, 5, 10), torch.zeros(2, 6, dtype=torch.long))
    with pytest.raises(ValueError, match="logits"):
        causal_lm_loss(torch.zeros(2, 5, 10, dtype=torch.long), torch.zeros(2, 5, dtype=torch.long))


# ------------------------------------------------------------------------------------ T5 span corruption

SENTINEL = 999  # <extra_id_0> = vocab_size - 1 for a vocabulary of 1000


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 800), min_size=2, max_size=120),
    noise=st.floats(0.05, 0.9),
    span=st.floats(1.0, 8.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_span_corruption_round_trips(tokens, noise, span, seed):
    tokens = torch.tensor(tokens)
    g = torch.Generator().manual_seed(seed)
    inputs, targets = span_corruption(
        tokens, noise_density=noise, mean_span_length=span, sentinel_start_id=SENTINEL, generator=g
    )
    torch.testing.assert_close(span_uncorrupt(inputs, targets, sentinel_start_id=SENTINEL), tokens)
    # Sentinels count down from <extra_id_0>, in the same order in inputs and targets.
    in_sentinels = inputs[inputs > 800].tolist()
    out_sentinels = targets[targets > 800].tolist()
    assert in_sentinels == out_sentinels == list(range(SENTINEL, SENTINEL - len(in_sentinels), -1))
    assert targets[0] == SENTINEL  # targets open with <extra_id_0>
    assert len(inputs) + len(targets) == len(tokens) + 2 * len(in_sentinels)


def test_span_corruption_noise_fraction_and_mean_span_length():
    g = torch.Generator().manual_seed(0)
    noise_tokens = spans = total = 0
    span_lengths: list[int] = []
    for length in range(20, 400, 3):
        tokens = torch.randint(0, 800, (length,), generator=g)
        inputs, targets = span_corruption(tokens, sentinel_start_id=SENTINEL, generator=g)
        is_sentinel = targets > 800
        noise_tokens += int((~is_sentinel).sum())
        spans += int(is_sentinel.sum())
        total += length
        starts = is_sentinel.nonzero().flatten().tolist() + [len(targets)]
        span_lengths += [b - a - 1 for a, b in zip(starts, starts[1:])]
    assert abs(noise_tokens / total - 0.15) < 0.01
    assert abs(noise_tokens / spans - 3.0) < 0.15
    # The spans are random: their lengths vary around the mean, they are not all 3.
    assert min(span_lengths) == 1 and max(span_lengths) >= 6


def test_span_noise_mask_is_random_and_starts_clean():
    masks = [span_noise_mask(100, generator=torch.Generator().manual_seed(s)) for s in range(5)]
    assert all(int(m.sum()) == 15 and not m[0] and m[-1] for m in masks)
    assert len({tuple(m.tolist()) for m in masks}) == 5


def test_span_corruption_matches_the_t5_figure():
    # Raffel et al. (2020), figure 2, with the mask of the figure given by hand: rebuild the example
    # from the sentinel layout alone to check that inputs and targets are laid out as in the paper.
    words = "Thank you for inviting me to your party last week .".split()
    vocab = {w: i for i, w in enumerate(words)}
    tokens = torch.tensor([vocab[w] for w in words])
    X, Y = SENTINEL, SENTINEL - 1
    paper_inputs = torch.tensor(
        [vocab["Thank"], vocab["you"], X, vocab["me"], vocab["to"], vocab["your"]]
        + [vocab["party"], Y, vocab["week"], vocab["."]]
    )
    paper_targets = torch.tensor([X, vocab["for"], vocab["inviting"], Y, vocab["last"]])
    torch.testing.assert_close(
        span_uncorrupt(paper_inputs, paper_targets, sentinel_start_id=SENTINEL), tokens
    )


def test_span_corruption_errors():
    with pytest.raises(ValueError, match="sentinel range"):
        span_corruption(torch.tensor([1, 2, 995, 4]), sentinel_start_id=SENTINEL)
    with pytest.raises(ValueError, match="length"):
        span_corruption(torch.tensor([1]), sentinel_start_id=SENTINEL)
    with pytest.raises(ValueError, match="tokens"):
        span_corruption(torch.tensor([[1, 2], [3, 4]]), sentinel_start_id=SENTINEL)
    with pytest.raises(ValueError, match="noise_density"):
        span_corruption(torch.arange(10), noise_density=2.0, sentinel_start_id=SENTINEL)
    with pytest.raises(ValueError, match="no span follows sentinel"):
        span_uncorrupt(
            torch.tensor([1, SENTINEL]), torch.tensor([SENTINEL - 1, 5]), sentinel_start_id=SENTINEL
        )
