"""Generation: cached decoding equals the full forward, greedy equals Hugging Face, sampling filters."""

from __future__ import annotations

import pytest
import torch

from attn_edu.generation import (
    apply_temperature,
    count_layers,
    generate,
    generate_seq2seq,
    next_token_probs,
    sample_next_token,
    top_k_filter,
    top_p_filter,
)
from attn_edu.kv_cache import KVCache
from attn_edu.models import GPT, T5, GPTConfig, Llama, LlamaConfig, T5Config
from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny_models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {
        "gpt": GPT(GPTConfig(vocab_size=40, max_seq_len=32, embed_dim=32, num_heads=4, ffn_dim=64)),
        "llama-gqa": Llama(LlamaConfig(vocab_size=40, embed_dim=32, num_heads=4, num_kv_heads=2, ffn_dim=64)),
        "attention-only": AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=40, embed_dim=32)),
    }


# ---------------------------------------------------------------------------------- cache correctness


@pytest.mark.parametrize("name", ["gpt", "llama-gqa", "attention-only"])
@pytest.mark.parametrize("chunks", [[5, 1, 1, 1, 1, 1, 1, 1], [3, 4, 1, 4]])
def test_incremental_decoding_equals_full_forward(name, chunks):
    model = tiny_models()[name].eval()
    ids = torch.randint(40, (2, sum(chunks)), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids)  # (B, T, V)
        cache = KVCache(count_layers(model))
        pieces, start = [], 0
        for size in chunks:  # a prompt, then a token (or a few) at a time
            pieces.append(model(ids[:, start : start + size], kv_cache=cache))
            start += size
    assert cache.seq_len == ids.shape[1]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


def test_generate_with_and_without_cache_agree_when_sampling():
    model = tiny_models()["llama-gqa"]
    prompt = torch.randint(40, (3, 4), generator=torch.Generator().manual_seed(0))
    runs = [
        generate(
            model,
            prompt,
            12,
            use_cache=c,
            temperature=0.8,
            top_k=10,
            generator=torch.Generator().manual_seed(5),
        )
        for c in (True, False)
    ]
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(runs[0][:, :4], prompt) and runs[0].shape == (3, 16)


# ------------------------------------------------------------------------ greedy vs Hugging Face


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")


def hf_greedy(hf_model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    hf_model.generation_config.eos_token_id = None  # never stop early: compare every token
    hf_model.generation_config.pad_token_id = 0
    with torch.no_grad():
        return hf_model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens, do_sample=False
        )


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generate_equals_hugging_face_gpt2(transformers, use_cache):
    torch.manual_seed(0)
    # A larger init spread than GPT-2's 0.02 keeps the top two logits apart, so float rounding
    # cannot decide a greedy tie differently in the two implementations.
    config = transformers.GPT2Config(
        vocab_size=50, n_positions=48, n_embd=32, n_layer=2, n_head=4, initializer_range=0.2
    )
    hf_model = transformers.GPT2LMHeadModel(config).eval()
    ours = GPT.from_hf(hf_model)
    prompt = torch.randint(50, (2, 5), generator=torch.Generator().manual_seed(3))
    want = hf_greedy(hf_model, prompt, 20)
    got = generate(ours, prompt, 20, use_cache=use_cache)
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generate_equals_hugging_face_llama_gqa(transformers, use_cache):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # GQA: two query heads share each key/value head
        max_position_embeddings=64,
        initializer_range=0.2,
    )
    hf_model = transformers.LlamaForCausalLM(config).eval()
    ours = Llama.from_hf(hf_model)
    prompt = torch.randint(50, (2, 5), generator=torch.Generator().manual_seed(4))
    want = hf_greedy(hf_model, prompt, 20)
    got = generate(ours, prompt, 20, use_cache=use_cache)
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_seq2seq_equals_hugging_face_t5(transformers, use_cache):
    """Encoder-decoder generation, padding in the source included, token for token against T5's generate."""
    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=50, d_model=32, d_kv=8, num_heads=4, d_ff=48, num_layers=2, num_decoder_layers=2,
        relative_attention_num_buckets=8, relative_attention_max_distance=6, decoder_start_token_id=0,
        initializer_factor=4.0,  # a wider init keeps the top two logits apart (no rounding-decided ties)
    )  # fmt: skip
    hf_model = transformers.T5ForConditionalGeneration(config).eval()
    ours = T5.from_hf(hf_model)
    source = torch.randint(2, 50, (3, 9), generator=torch.Generator().manual_seed(5))
    mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3, [1] * 2 + [0] * 7])  # (B, S): rows 2 and 3 padded
    hf_model.generation_config.eos_token_id = None  # never stop early: compare every token
    hf_model.generation_config.pad_token_id = 0
    with torch.no_grad():
        want = hf_model.generate(input_ids=source, attention_mask=mask, max_new_tokens=12, do_sample=False)
    got = generate_seq2seq(ours, source, 12, attention_mask=mask, use_cache=use_cache)
    assert torch.equal(got, want), (got, want)
    assert len(set(got[:, 1:].flatten().tolist())) > 3  # a real sequence, not one token repeated


def test_seq2seq_cache_changes_the_work_not_the_tokens():
    torch.manual_seed(0)
    model = T5(T5Config(vocab_size=30, embed_dim=32, num_heads=4, ffn_dim=64, num_decoder_layers=3))
    source = torch.randint(30, (2, 7))
    projections = []
    for block in model.decoder_blocks:
        block.cross_attn.k_proj.register_forward_hook(lambda *_: projections.append(1))
    cached = generate_seq2seq(model, source, 10, temperature=0.8, generator=torch.Generator().manual_seed(1))
    assert len(projections) == 3  # the encoder output's keys: projected once per decoder layer
    projections.clear()
    full = generate_seq2seq(
        model, source, 10, temperature=0.8, generator=torch.Generator().manual_seed(1), use_cache=False
    )
    assert len(projections) == 3 * 10  # without a cache: every layer, every step
    assert torch.equal(cached, full) and cached.shape == (2, 11) and (cached[:, 0] == 0).all()
    with pytest.raises(ValueError, match=r"model: .*encode\(\)"):
        generate_seq2seq(tiny_models()["gpt"], source, 2)


# ----------------------------------------------------------------------------------- sampling filters


def test_top_k_keeps_k_tokens_and_renormalises():
    logits = torch.randn(6, 30, generator=torch.Generator().manual_seed(0))
    for k in (1, 5, 30):
        filtered = top_k_filter(logits, k)
        kept = filtered.isfinite()
        assert (kept.sum(-1) == k).all()
        # The kept tokens are the k most likely, with their relative probabilities unchanged.
        assert torch.equal(kept, logits >= logits.topk(k, dim=-1).values[..., -1:])
        p, q = logits.softmax(-1), filtered.softmax(-1)
        torch.testing.assert_close(q, torch.where(kept, p / (p * kept).sum(-1, keepdim=True), 0.0))


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.randn(8, 25, generator=torch.Generator().manual_seed(0)) * 2
    probs = logits.softmax(-1)
    for p in (0.05, 0.3, 0.9, 0.999):
        kept = top_p_filter(logits, p).isfinite()
        assert (kept.sum(-1) >= 1).all()
        mass = (probs * kept).sum(-1)
        # Every kept token is at least as likely as every dropped one ...
        lowest_kept = torch.where(kept, probs, 2.0).min(-1).values
        highest_dropped = torch.where(kept, -1.0, probs).max(-1).values
        assert (lowest_kept >= highest_dropped).all()
        # ... the kept mass reaches p, and without the least likely kept token it would not.
        assert (mass >= p - 1e-6).all()
        assert (mass - lowest_kept < p).all()
        torch.testing.assert_close(
            top_p_filter(logits, p).softmax(-1), torch.where(kept, probs / mass[:, None], 0.0)
        )


def test_top_p_keeps_at_least_one_token_and_p_one_is_identity():
    logits = torch.tensor([[10.0, 0.0, -1.0]])
    assert top_p_filter(logits, 1e-6).isfinite().sum() == 1
    for x in (logits, torch.randn(4, 100)):
        assert torch.equal(top_p_filter(x, 1.0), x)


def test_sampling_frequencies_follow_the_filtered_softmax():
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])
    draws = sample_next_token(
        logits.expand(20000, 5),
        temperature=0.7,
        top_k=4,
        top_p=0.9,
        generator=torch.Generator().manual_seed(0),
    )
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    want = top_p_filter(top_k_filter(logits / 0.7, 4), 0.9).softmax(-1)
    torch.testing.assert_close(freq, want, atol=0.015, rtol=0)
    assert freq[4] == 0  # cut by top-k


def test_seeds_make_sampling_reproducible_and_greedy_is_argmax():
    model = tiny_models()["gpt"]
    prompt = torch.randint(40, (2, 3), generator=torch.Generator().manual_seed(0))

    def run(seed):
        return generate(model, prompt, 15, temperature=1.5, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(1), run(1))
    assert not torch.equal(run(1), run(2))
    greedy = generate(model, prompt, 15)
    assert torch.equal(
        greedy, generate(model, prompt, 15, temperature=1.0, top_k=1, generator=torch.Generator())
    )
    logits = torch.randn(4, 9)
    assert torch.equal(sample_next_token(logits, temperature=0.0), logits.argmax(-1))
    root = logits.softmax(-1) ** 0.5  # temperature 2 turns p into sqrt(p), renormalised
    torch.testing.assert_close(apply_temperature(logits, 2.0).softmax(-1), root / root.sum(-1, keepdim=True))


def test_eos_stops_generation_and_pads_finished_rows():
    class Countdown(torch.nn.Module):
        """Predicts ``last token - 1``, so a row reaches token 0 (the EOS here) after `last` steps."""

        def forward(self, ids):
            return torch.nn.functional.one_hot((ids - 1).clamp(min=0), 10).float()

    out = generate(Countdown(), torch.tensor([[2], [4]]), 8, use_cache=False, eos_token_id=0)
    assert out.tolist() == [[2, 1, 0, 0, 0], [4, 3, 2, 1, 0]]  # stops once every row has finished


def test_generate_restores_training_mode():
    model = tiny_models()["gpt"].train()
    generate(model, torch.zeros(1, 2, dtype=torch.long), 2)
    assert model.training


def test_generation_errors():
    logits = torch.randn(2, 5)
    with pytest.raises(ValueError, match="temperature"):
        apply_temperature(logits, 0.0)
    with pytest.raises(ValueError, match="temperature"):
        sample_next_token(logits, temperature=-1.0)
    with pytest.raises(ValueError, match="k: expected a positive int"):
        top_k_filter(logits, 0)
    with pytest.raises(ValueError, match=r"p: expected a probability in \(0, 1\]"):
        top_p_filter(logits, 0.0)
    with pytest.raises(ValueError, match=r"logits: expected shape \(B, V\)"):
        sample_next_token(torch.randn(5))
    model = tiny_models()["gpt"]
    with pytest.raises(ValueError, match=r"input_ids: expected shape \(B, T\)"):
        generate(model, torch.zeros(3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, torch.zeros(1, 3, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="use_cache=False"):
        generate(torch.nn.Identity(), torch.zeros(1, 3, dtype=torch.long), 1)


# ------------------------------------------------------------------------ the next-token distribution


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, None, None), (0.5, None, None), (2.0, 3, None), (1.0, None, 0.6), (0.7, 5, 0.8), (1.0, 1, 0.5)],
)
def test_next_token_probs_sum_to_one_and_filtered_tokens_get_exactly_zero(temperature, top_k, top_p):
    logits = torch.randn(3, 4, 12, generator=torch.Generator().manual_seed(0)) * 2  # (..., V)
    probs = next_token_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    assert probs.shape == logits.shape and probs.dtype == torch.float32
    torch.testing.assert_close(probs.sum(-1), torch.ones(3, 4))
    z = logits / temperature  # (..., V) the same pipeline, written out with the public filters
    z = top_k_filter(z, top_k) if top_k is not None else z
    z = top_p_filter(z, top_p) if top_p is not None else z
    kept = z.isfinite()  # (..., V)
    assert torch.equal(probs > 0, kept)
    assert torch.equal(probs[~kept], torch.zeros_like(probs[~kept]))  # exactly 0, not just small
    p = logits.div(temperature).softmax(-1)  # kept tokens keep their relative probabilities
    torch.testing.assert_close(probs, torch.where(kept, p / (p * kept).sum(-1, keepdim=True), 0.0))


def test_next_token_probs_greedy_is_one_hot_at_the_argmax():
    logits = torch.tensor([[0.0, 5.0, 1.0], [2.0, -1.0, 2.0]])  # row 1: a tie, the first index wins
    want = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert torch.equal(next_token_probs(logits, temperature=0.0), want)
    assert torch.equal(next_token_probs(logits, temperature=0.0, top_k=1, top_p=0.1), want)


def test_sample_next_token_frequencies_follow_next_token_probs():
    logits = torch.tensor([1.5, 1.0, 0.5, 0.0, -0.5, -3.0])
    settings = dict(temperature=1.3, top_k=5, top_p=0.85)
    draws = sample_next_token(logits.expand(20000, 6), **settings, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=6).float() / len(draws)
    want = next_token_probs(logits, **settings)  # (V,)
    torch.testing.assert_close(freq, want, atol=0.015, rtol=0)
    assert torch.equal(freq == 0, want == 0)  # never a filtered token, every kept one drawn


def test_greedy_sampling_draws_nothing_from_the_generator():
    generator = torch.Generator().manual_seed(0)
    before = generator.get_state()
    sample_next_token(torch.randn(4, 9), temperature=0.0, generator=generator)
    assert torch.equal(generator.get_state(), before)


def test_next_token_probs_errors_name_the_argument():
    logits = torch.randn(2, 5)
    with pytest.raises(ValueError, match=r"temperature: expected a number >= 0"):
        next_token_probs(logits, temperature=-0.5)
    with pytest.raises(ValueError, match=r"top_k: expected a positive int, or None"):
        next_token_probs(logits, top_k=0)
    with pytest.raises(ValueError, match=r"top_p: expected a probability in \(0, 1\], or None"):
        next_token_probs(logits, top_p=1.5)
    with pytest.raises(ValueError, match="logits: expected a floating-point tensor"):
        next_token_probs(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"logits: expected shape \(\.\.\., V\)"):
        next_token_probs(torch.tensor(1.0))
