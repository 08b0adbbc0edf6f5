"""Checks for notebook 11's recurrent-state exercises: one write of Gated DeltaNet (11.6), and a chunk's corrections
all at once, by one triangular solve, equal to what the recurrence writes token by token (11.8).

11.6's reference is :func:`attn_edu.delta_rule.gated_delta_step`; so is 11.8's, run one token at a time: the
learner's chunked form must equal the recurrence, which is the point of the exercise. Keys are unit vectors, as Gated DeltaNet L2-normalises them; cases include a chunk of one token, a zero
starting state, ``Dk != Dv``, and a decay strong enough that ``exp`` of the summed log decay underflows float32,
which only differences of log decays survive. The known-wrong versions are the slips of the derivation: linear
attention's update, the decay applied after the write or not at all, β on the value only; in the chunk, the gates
left out, the step's own term kept on the left, the starting state not read, the decay of step t itself missed,
and the correction's sign flipped.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_edu.grading.exercise import Case, Exercise, Mistake, Property


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


# ---------------------------------------------------------------------------------------------------------
# 11.6 one write of Gated DeltaNet: decay the state, then write the correction


def _delta_cases(g: torch.Generator) -> list[Case]:
    def case(B: int, H: int, Dk: int, Dv: int, *, decay: float = 1.0, full: bool = False) -> Case:
        state = _randn(g, B, H, Dk, Dv)  # (B, H, Dk, Dv): whatever earlier tokens wrote
        k = F.normalize(_randn(g, B, H, Dk), dim=-1)  # (B, H, Dk): unit keys
        v = _randn(g, B, H, Dv)  # (B, H, Dv)
        log_decay = -decay * torch.rand(B, H, generator=g)  # (B, H): g <= 0
        beta = torch.ones(B, H) if full else torch.rand(B, H, generator=g)  # (B, H)
        return Case((state, k, v, log_decay, beta))

    return [
        case(1, 2, 4, 3),  # Dk != Dv
        case(2, 3, 5, 5, decay=3.0),  # strong decay
        case(1, 1, 6, 2, full=True),  # β = 1: the state then recalls v exactly for k
        case(2, 2, 3, 4, decay=0.0),  # g = 0: no decay at all (plain DeltaNet)
        case(1, 4, 8, 8),
    ]


def _delta_write(
    state: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    beta: torch.Tensor,
    *,
    decay_first: bool = True,
    correct: bool = True,
    beta_on_value_only: bool = False,
) -> torch.Tensor:
    alpha = log_decay.exp()[..., None, None]  # (B, H, 1, 1)
    decayed = state * alpha if decay_first else state
    recalled = (k[..., None, :] @ decayed).squeeze(-2) if correct else torch.zeros_like(v)  # (B, H, Dv)
    if beta_on_value_only:
        correction = beta[..., None] * v - recalled
    else:
        correction = beta[..., None] * (v - recalled)  # (B, H, Dv)
    new = decayed + k[..., :, None] * correction[..., None, :]  # (B, H, Dk, Dv)
    return new if decay_first else new * alpha


def _delta_reference(
    state: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor, beta: torch.Tensor
) -> torch.Tensor:
    from attn_edu.delta_rule import gated_delta_step

    return gated_delta_step(state, k, k, v, log_decay, beta)[1]  # the new state (the read does not change it)


def _recalls_value(case: Case, output: torch.Tensor) -> str | None:
    _, k, v, _, _ = case.args
    recalled = (k[..., None, :] @ output).squeeze(-2)  # (B, H, Dv)
    if not torch.allclose(recalled, v, atol=1e-4):
        gap = float((recalled - v).abs().max())
        return f"with β = 1 the new state must return v for k (Sᵀk = v), but it is {gap:.3g} away"
    return None


DELTA_WRITE = Exercise(
    exercise_id="11.6",
    title="one Gated DeltaNet write: S ← α S, then S ← S + β k (v − Sᵀk)ᵀ, for every batch and head",
    function_name="delta_write",
    arg_names=("state", "k", "v", "log_decay", "beta"),
    reference=_delta_reference,
    make_cases=_delta_cases,
    mistakes=(
        Mistake(
            lambda *a: _delta_write(*a, correct=False),
            "this adds β k vᵀ, linear attention's update: the delta rule first reads what the state already "
            "holds for k (Sᵀk, after the decay) and writes only the difference v − Sᵀk.",
        ),
        Mistake(
            lambda *a: _delta_write(*a, decay_first=False),
            "the decay comes after the write here, so the new value is shrunk too: Gated DeltaNet forgets first "
            "(S ← α S), then reads and writes into the decayed state.",
        ),
        Mistake(
            lambda state, k, v, log_decay, beta: _delta_write(state, k, v, torch.zeros_like(log_decay), beta),
            "the state is never decayed: α = exp(log_decay) multiplies the whole state before the write (the "
            "argument is the log of the decay, so exp it).",
        ),
        Mistake(
            lambda *a: _delta_write(*a, beta_on_value_only=True),
            "β scales v but not what the state recalls: the write strength multiplies the whole correction, "
            "β (v − Sᵀk), so that β = 0 writes nothing and β = 1 replaces the value.",
        ),
    ),
    properties=(
        Property(
            "a full write recalls the value",
            "with β = 1 and a unit key, the new state returns exactly v for k: Sᵀk = v.",
            holds=_recalls_value,
        ),
    ),
    hints=(
        "three steps per (batch, head): shrink the state by α = exp(log_decay); ask it what it holds for k; add "
        "the outer product of k and the scaled difference.",
        "what the state holds for k is kᵀS, a (Dv,) vector per batch and head: the key as a row times "
        "the (Dk, Dv) state. Take it from the decayed state, then the correction is β times (v minus "
        "that).",
        "a sketch: recalled = (k[..., None, :] @ S).squeeze(-2); the correction β (v − kᵀS) has shape "
        "(B, H, Dv); its outer product with k is k[..., :, None] * correction[..., None, :], shape (B, "
        "H, Dk, Dv), like the state.",
    ),
    difficulty=3,
    minutes=15,
    atol=1e-4,
)


# ---------------------------------------------------------------------------------------------------------
# 11.8 a chunk's corrections at once: (I + A) U = β V - diag(β γ) K S₀, one triangular solve


def _chunk_cases(g: torch.Generator) -> list[Case]:
    def case(B: int, H: int, C: int, Dk: int, Dv: int, *, decay: float = 1.0, zero: bool = False) -> Case:
        state = torch.zeros(B, H, Dk, Dv) if zero else _randn(g, B, H, Dk, Dv)  # (B, H, Dk, Dv): S₀
        k = F.normalize(_randn(g, B, H, C, Dk), dim=-1)  # (B, H, C, Dk): unit keys
        v = _randn(g, B, H, C, Dv)  # (B, H, C, Dv)
        log_decay = -decay * torch.rand(B, H, C, generator=g)  # (B, H, C): g <= 0
        beta = torch.rand(B, H, C, generator=g)  # (B, H, C)
        return Case((state, k, v, log_decay, beta))

    return [
        case(1, 2, 4, 3, 5),  # Dk != Dv
        case(2, 1, 6, 4, 4, zero=True),  # S₀ = 0: the first chunk of a sequence
        case(1, 3, 1, 5, 2),  # one token: nothing earlier to correct for
        case(1, 1, 16, 8, 3, decay=20.0),  # the summed log decay reaches about -160: exp(c) alone underflows
        case(2, 2, 8, 6, 6, decay=0.0),  # no decay: plain DeltaNet
    ]


def _recurrent_corrections(
    state: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_decay: torch.Tensor, beta: torch.Tensor
) -> torch.Tensor:
    """What the recurrence writes at each step, one token at a time with the library's step: the state changes
    by k_t u_tᵀ after its decay, and k_tᵀ (k_t u_tᵀ) = u_t for a unit key."""
    from attn_edu.delta_rule import gated_delta_step

    corrections = []
    for t in range(k.shape[-2]):
        k_t, g_t = k[..., t, :], log_decay[..., t]  # (B, H, Dk), (B, H)
        decayed = state * g_t.exp()[..., None, None]  # (B, H, Dk, Dv)
        _, state = gated_delta_step(state, k_t, k_t, v[..., t, :], g_t, beta[..., t])
        corrections.append((k_t[..., None, :] @ (state - decayed)).squeeze(-2))  # (B, H, Dv)
    return torch.stack(corrections, dim=-2)  # (B, H, C, Dv)


def _chunk_solve(
    state: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    beta: torch.Tensor,
    *,
    gates: bool = True,
    diagonal: int = -1,
    read_state: bool = True,
    own_decay: bool = True,
    sign: float = 1.0,
) -> torch.Tensor:
    """The chunked corrections, with one slip switched on by each keyword."""
    C = k.shape[-2]
    c = log_decay.cumsum(-1) if gates else torch.zeros_like(log_decay)  # (B, H, C)
    if not own_decay:
        c = c - log_decay
    causal = torch.ones(C, C, dtype=torch.bool).tril()
    between = (c[..., :, None] - c[..., None, :]).masked_fill(~causal, -torch.inf).exp()  # (B, H, C, C)
    A = (beta[..., None] * (k @ k.transpose(-1, -2)) * between).tril(diagonal)  # (B, H, C, C)
    right = beta[..., None] * v  # (B, H, C, Dv)
    if read_state:
        right = right - (beta * c.exp())[..., None] * (k @ state)
    return torch.linalg.solve_triangular(torch.eye(C) + sign * A, right, upper=False)


def _underflow(case: Case, got: torch.Tensor) -> str | None:
    if not torch.isfinite(got).all():
        return (
            "exp of a summed log decay underflows to 0 once it passes about -100 in float32, and 0 / 0 is NaN: "
            "take the difference of the log decays first, then exp it, exp(c_t - c_s)."
        )
    return None


CHUNK_CORRECTIONS = Exercise(
    exercise_id="11.8",
    title="a chunk's Gated DeltaNet corrections all at once, (I + A) U = β V − β γ K S₀, equal to the recurrence",
    function_name="chunk_corrections",
    arg_names=("state", "k", "v", "log_decay", "beta"),
    reference=_recurrent_corrections,
    make_cases=_chunk_cases,
    mistakes=(
        Mistake(
            lambda *a: _chunk_solve(*a, gates=False),
            "the gates are left out: between step s and step t the state decays by exp(c_t − c_s), with c the "
            "running sum of log_decay; it scales both A and what is read from S₀ (γ_t = exp(c_t)).",
        ),
        Mistake(
            lambda *a: _chunk_solve(*a, diagonal=0),
            "A keeps its diagonal: step t's correction depends on the earlier corrections only (s < t), so A is "
            "strictly lower triangular and I + A has ones on its diagonal.",
        ),
        Mistake(
            lambda *a: _chunk_solve(*a, read_state=False),
            "the chunk's starting state S₀ is never read: every step also corrects what S₀ already holds for its "
            "key, decayed to that step, so the right side is β V − β γ (K S₀).",
        ),
        Mistake(
            lambda *a: _chunk_solve(*a, own_decay=False),
            "step t's own decay is missing: Gated DeltaNet decays the state before it reads, so c_t sums the log "
            "decays up to and including step t.",
        ),
        Mistake(
            lambda *a: _chunk_solve(*a, sign=-1.0),
            "the earlier writes enter with the wrong sign: what they put under k_t is subtracted from v_t, so "
            "moving it to the left gives (I + A) U, not (I − A) U.",
        ),
    ),
    diagnoses=(_underflow,),
    hints=(
        "unroll the recurrence inside the chunk: what the state holds for k_t before step t's write is "
        "S₀, decayed to step t, plus every earlier write k_s u_sᵀ, decayed from step s to step t. Put "
        "that into u_t = β_t (v_t − what it holds) and move every u to the left side.",
        "with c the running sum of log_decay over the chunk, the factor from step s to step t is exp(c_t − c_s); "
        "the coefficient of u_s in step t's equation is β_t exp(c_t − c_s) (k_t · k_s), for s < t only.",
        "all steps at once: a (C, C) strictly lower triangular A, a right side β V − β γ (K S₀) with "
        "γ_t = exp(c_t), and torch.linalg.solve_triangular(I + A, right side, upper=False).",
    ),
    difficulty=4,
    minutes=30,
    atol=1e-4,
)


EXERCISES = (DELTA_WRITE, CHUNK_CORRECTIONS)
