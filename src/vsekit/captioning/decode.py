"""Decoding captions from a step-wise generator: greedy, sampling with temperature, and beam search.

A generator is anything with the :class:`StepModel` protocol (the multimodal RNN implements it):
``start(features) -> (log p(w_1) [n, V], state)``, ``step(words [n], state) -> (log p(next) [n, V],
state)`` and ``reorder_state(state, index)``. All decoders are batched over images.

Rules shared by every decoder, so their outputs are comparable:

- <pad>, <start> and <unk> are never emitted; END is not allowed as the first word (no empty caption).
- A caption has at most ``max_len`` words: at step ``max_len + 1`` only END is allowed, so every
  hypothesis ends with END and its score always includes log p(END).
- A caption's score is the sum of the log-probabilities of its words and END.

Beam search keeps ``beam_size`` live hypotheses per image. Each step expands them all and keeps the
``beam_size`` best expansions; an expansion that picks END is *finished*: it is moved to the image's
finished list and its slot is refilled by the next-best live expansion at the following step. The
final ranking of finished hypotheses is by score, or by ``score / (words + 1) ** length_penalty`` when a
length penalty is given (Wu et al. 2016 use a similar normalisation; 0 disables it). An image stops
when no live hypothesis can still enter its top ``n_best`` finished ones: exact without a length
penalty, because log-probabilities only decrease as a hypothesis grows; with a penalty it stops once
``beam_size`` hypotheses have finished (as most toolkits do). With ``beam_size=1`` this is exactly
greedy decoding (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError

__all__ = ["Caption", "StepModel", "beam_search", "greedy", "sample"]

_NEG_INF = float("-inf")


class StepModel(Protocol):
    def start(self, features: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]: ...

    def step(
        self, words: torch.Tensor, state: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]: ...

    def reorder_state(
        self, state: tuple[torch.Tensor, ...], index: torch.Tensor
    ) -> tuple[torch.Tensor, ...]: ...


@dataclass(frozen=True)
class Caption:
    """One decoded caption: word ids (without START/END) and its summed log-probability (END included)."""

    tokens: tuple[int, ...]
    log_prob: float

    def normalized(self, length_penalty: float) -> float:
        return self.log_prob / ((len(self.tokens) + 1) ** length_penalty) if length_penalty else self.log_prob


def _constrain(logp: torch.Tensor, t: int, max_len: int) -> torch.Tensor:
    """Apply the shared rules to step ``t``'s log-probabilities (t = 0 picks the first word)."""
    logp = logp.clone()
    logp[:, [Vocabulary.pad_id, Vocabulary.start_id, Vocabulary.unk_id]] = _NEG_INF
    if t == 0:
        logp[:, Vocabulary.end_id] = _NEG_INF
    if t >= max_len:
        end = logp[:, Vocabulary.end_id].clone()
        logp.fill_(_NEG_INF)
        logp[:, Vocabulary.end_id] = end
    return logp


def _bar_repeats(logp: torch.Tensor, history: list[list[int]], n: int) -> torch.Tensor:
    """``logp`` [rows, V] with -inf on every word that would close an ``n``-gram already in its row's
    ``history`` (the words so far); ``n`` = 0 leaves it alone."""
    if n <= 0:
        return logp
    rows, words = [], []
    for row, tokens in enumerate(history):
        if len(tokens) < n:
            continue
        tail = tuple(tokens[len(tokens) - n + 1 :])
        for i in range(len(tokens) - n + 1):
            if tuple(tokens[i : i + n - 1]) == tail:
                rows.append(row)
                words.append(tokens[i + n - 1])
    if rows:
        logp = logp.clone()
        logp[rows, words] = _NEG_INF
    return logp


def _bar_said(logp: torch.Tensor, history: torch.Tensor, once: torch.Tensor | None) -> torch.Tensor:
    """``logp`` [rows, V] with -inf on every word of ``once`` [V] (bool) already in its row's ``history``
    [rows, t]: words a caption may say only once; None leaves it alone."""
    if once is None or history.shape[1] == 0:
        return logp
    said = torch.zeros(logp.shape, dtype=torch.bool).scatter_(1, history, True)
    return logp.masked_fill(said & once, _NEG_INF)


def _check(features: torch.Tensor, max_len: int) -> None:
    if features.ndim != 2:
        raise VsekitError(f"decoding expects image features [n, D]; got shape {tuple(features.shape)}")
    if max_len < 1:
        raise VsekitError(f"max_len must be at least 1, got {max_len}")


@torch.no_grad()
def _walk(
    model: StepModel, features: torch.Tensor, max_len: int, choose, no_repeat_ngram: int = 0
) -> list[Caption]:
    """Shared loop of greedy and sampling: ``choose(logp [n, V]) -> words [n]``."""
    _check(features, max_len)
    n = features.shape[0]
    logp, state = model.start(features)
    tokens: list[list[int]] = [[] for _ in range(n)]
    scores = torch.zeros(n, dtype=torch.float64)
    alive = torch.ones(n, dtype=torch.bool)
    for t in range(max_len + 1):
        logp = _bar_repeats(_constrain(logp, t, max_len), tokens, no_repeat_ngram)
        words = choose(logp)
        scores += torch.where(alive, logp.gather(1, words[:, None])[:, 0].double().cpu(), 0.0)
        for i in torch.nonzero(alive).flatten().tolist():
            if int(words[i]) != Vocabulary.end_id:
                tokens[i].append(int(words[i]))
        alive &= words.cpu() != Vocabulary.end_id
        if not bool(alive.any()):
            break
        logp, state = model.step(words, state)
    return [Caption(tuple(tok), float(s)) for tok, s in zip(tokens, scores.tolist(), strict=True)]


def greedy(
    model: StepModel, features: torch.Tensor, max_len: int = 20, no_repeat_ngram: int = 0
) -> list[Caption]:
    """The most probable word at every step, for each image of ``features [n, D]``."""
    return _walk(model, features, max_len, lambda logp: logp.argmax(dim=-1), no_repeat_ngram)


def sample(
    model: StepModel,
    features: torch.Tensor,
    temperature: float = 1.0,
    max_len: int = 20,
    generator: torch.Generator | None = None,
    no_repeat_ngram: int = 0,
) -> list[Caption]:
    """Words drawn from p(w)^(1/T) at every step (T < 1 sharpens, T > 1 flattens; T -> 0 is greedy).

    The returned ``log_prob`` is the model's (untempered) log-probability of the drawn caption.
    """
    if temperature <= 0:
        raise VsekitError(f"temperature must be positive, got {temperature}")

    def draw(logp: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logp.double() / temperature, dim=-1)
        return torch.multinomial(probs.cpu(), 1, generator=generator)[:, 0].to(logp.device)

    return _walk(model, features, max_len, draw, no_repeat_ngram)


@torch.no_grad()
def beam_search(
    model: StepModel,
    features: torch.Tensor,
    beam_size: int = 3,
    max_len: int = 20,
    length_penalty: float = 0.0,
    n_best: int = 1,
    word_bias: torch.Tensor | None = None,
    prefix: torch.Tensor | None = None,
    no_repeat_ngram: int = 0,
    once: torch.Tensor | None = None,
) -> list[list[Caption]]:
    """The ``n_best`` highest-scoring captions per image, best first (see the module docstring).

    ``word_bias`` ``[n, V]`` is added to every step's log-probabilities of image ``n`` (the concept guard,
    :mod:`vsekit.captioning.guard`), so scores include it; ``prefix`` ``[n, P]`` word ids every caption of
    image ``n`` starts with (scored like the rest; P < ``max_len``); ``once`` ``[V]`` (bool): words a
    caption says at most once, the prefix included."""
    _check(features, max_len)
    if beam_size < 1:
        raise VsekitError(f"beam size must be at least 1, got {beam_size}")
    if not 1 <= n_best <= beam_size:
        raise VsekitError(f"n_best must be between 1 and the beam size ({beam_size}), got {n_best}")
    n, k = features.shape[0], beam_size
    logp, state = model.start(features)
    bias = (
        torch.zeros(n, logp.shape[1], dtype=torch.float64) if word_bias is None else word_bias.double().cpu()
    )
    start, prefix_score, logp, state = _walk_prefix(model, logp, state, bias, prefix, max_len)
    vocab_size = logp.shape[1]
    if once is not None and tuple(once.shape) != (vocab_size,):
        raise VsekitError(f"once has shape {tuple(once.shape)}; the vocabulary has {vocab_size} words")
    once = None if once is None else once.cpu()  # the step's log-probabilities are barred on the CPU
    # every image's k slots start as copies of the single (prefixed) hypothesis; only slot 0 is live.
    repeat = torch.arange(n, device=logp.device).repeat_interleave(k)
    logp, state = logp.index_select(0, repeat), model.reorder_state(state, repeat)
    live = torch.full((n, k), _NEG_INF, dtype=torch.float64)
    live[:, 0] = prefix_score
    history = start[:, None, :].expand(n, k, start.shape[1]).clone()
    slot_bias = bias.repeat_interleave(k, dim=0)
    finished: list[list[Caption]] = [[] for _ in range(n)]
    done = torch.zeros(n, dtype=torch.bool)
    for t in range(start.shape[1], max_len + 1):
        step_logp = _constrain(logp, t, max_len).double().cpu() + slot_bias
        step_logp = _bar_repeats(step_logp, history.view(n * k, -1).tolist(), no_repeat_ngram)
        step_logp = _bar_said(step_logp, history.view(n * k, -1), once)
        step_logp = step_logp.view(n, k, vocab_size)
        candidates = (live.unsqueeze(-1) + step_logp).view(n, k * vocab_size)
        top_scores, top_index = candidates.topk(k, dim=1)
        parent, words = top_index // vocab_size, top_index % vocab_size
        history = torch.cat([history.gather(1, parent.unsqueeze(-1).expand(-1, -1, t)), words[..., None]], -1)
        is_end = (words == Vocabulary.end_id) & torch.isfinite(top_scores)
        for i, j in torch.nonzero(is_end & ~done[:, None]).tolist():
            finished[i].append(Caption(tuple(history[i, j, :-1].tolist()), float(top_scores[i, j])))
        live = torch.where(is_end, _NEG_INF, top_scores)
        _mark_done(done, finished, live, k, n_best, length_penalty)
        live[done] = _NEG_INF
        if bool(done.all()) or not bool(torch.isfinite(live).any()):
            break
        flat_parent = (torch.arange(n)[:, None] * k + parent).flatten().to(logp.device)
        state = model.reorder_state(state, flat_parent)
        logp, state = model.step(words.flatten().to(logp.device), state)
    return [
        sorted(caps, key=lambda c: c.normalized(length_penalty), reverse=True)[:n_best] for caps in finished
    ]


def _walk_prefix(
    model: StepModel,
    logp: torch.Tensor,
    state: tuple[torch.Tensor, ...],
    bias: torch.Tensor,
    prefix: torch.Tensor | None,
    max_len: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """Feed every image's forced first words: ``(prefix [n, P], its scores [n], logp, state)`` after it."""
    n = logp.shape[0]
    if prefix is None:
        return torch.zeros((n, 0), dtype=torch.long), torch.zeros(n, dtype=torch.float64), logp, state
    prefix = torch.as_tensor(prefix, dtype=torch.long).cpu()
    if prefix.shape[0] != n or prefix.shape[1] >= max_len:
        raise VsekitError(f"prefix of shape {tuple(prefix.shape)} for {n} images and max_len {max_len}")
    score = torch.zeros(n, dtype=torch.float64)
    for t in range(prefix.shape[1]):
        step = _constrain(logp, t, max_len).double().cpu() + bias
        score += step.gather(1, prefix[:, t : t + 1])[:, 0]
        logp, state = model.step(prefix[:, t].to(logp.device), state)
    return prefix, score, logp, state


def _mark_done(
    done: torch.Tensor, finished: list[list[Caption]], live: torch.Tensor, k: int, n_best: int, penalty: float
) -> None:
    """Mark the images whose live hypotheses can no longer enter their top ``n_best`` (module docstring)."""
    for i in range(len(finished)):
        if done[i] or not finished[i]:
            continue
        if penalty:
            stop = len(finished[i]) >= k
        else:
            ranked = sorted((c.log_prob for c in finished[i]), reverse=True)
            stop = len(ranked) >= n_best and float(live[i].max()) <= ranked[n_best - 1]
        if stop:
            done[i] = True
