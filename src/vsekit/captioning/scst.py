"""Self-critical sequence training (Rennie et al. 2017): fine-tune a captioner for CIDEr-D directly.

For each image, ``k`` captions w^s are sampled from the model and scored with CIDEr-D against the image's
references, r(w^s). The REINFORCE gradient with a baseline b (Rennie et al. Eq. 6-9)

    grad L = -(r(w^s) - b) grad log p(w^s | I)

is estimated with b = the reward of the model's own greedy caption (the "self-critical" baseline of
Rennie et al., Eq. 9), or b = the mean reward of the image's other k - 1 samples (Luo 2020, "a better
variant of SCST"). Captions better than the baseline are made more likely, worse ones less likely.

The model samples and is differentiated in ``eval()`` mode (no dropout), so the distribution the words
are drawn from is exactly the one whose log-probabilities get the gradient. That distribution is the
decoders' (:mod:`vsekit.captioning.decode`): <pad>, <start> and <unk> are never drawn, END never first,
END forced after ``max_len`` words; :func:`sequence_log_probs` renormalises the softmax the same way (a
forced END carries no choice and no gradient). The loss is averaged over the sampled words (END
included), as in the widely used implementation of Luo et al.; this only scales the learning rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from vsekit.captioning.mrnn import MultimodalRNN
from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError
from vsekit.metrics.cider_reward import CiderD

__all__ = ["BASELINES", "SCSTStats", "sample_tokens", "scst_loss", "sequence_log_probs"]

BASELINES = ("greedy", "mean")
_BANNED = (Vocabulary.pad_id, Vocabulary.start_id, Vocabulary.unk_id)


def _constrained(logits: torch.Tensor, position: torch.Tensor, max_len: int) -> torch.Tensor:
    """Log-probabilities of ``logits [n, V]`` under the decoders' rules at word ``position [n]`` (0 =
    the first word): banned ids removed, END not first, only END after ``max_len`` words."""
    logits = logits.float().clone()
    logits[:, list(_BANNED)] = float("-inf")
    logits[:, Vocabulary.end_id] = torch.where(position == 0, float("-inf"), logits[:, Vocabulary.end_id])
    last = position >= max_len
    if bool(last.any()):
        end = logits[last, Vocabulary.end_id].clone()
        logits[last] = float("-inf")
        logits[last, Vocabulary.end_id] = end
    return F.log_softmax(logits, dim=-1)


@torch.no_grad()
def sample_tokens(
    model: MultimodalRNN,
    features: torch.Tensor,
    max_len: int,
    generator: torch.Generator | None = None,
    greedy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One caption per row of ``features [n, D]``, all rows decoded together: ``(tokens [n, max_len]``
    (word ids, 0 after the caption), ``lengths [n])``. Words are drawn from the model's distribution with
    ``generator`` (or the most likely word, ``greedy``); the same rules as every decoder (module doc)."""
    if max_len < 1:
        raise VsekitError(f"max_len must be at least 1, got {max_len}")
    n = features.shape[0]
    tokens = torch.zeros(n, max_len, dtype=torch.long)
    lengths = torch.zeros(n, dtype=torch.long)
    alive = torch.ones(n, dtype=torch.bool)
    logits, state = model.start(features)  # log-probabilities; renormalised below
    for t in range(max_len + 1):
        logp = _constrained(logits.cpu(), torch.full((n,), t), max_len)
        if greedy:
            words = logp.argmax(dim=-1)
        else:
            words = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]
        emitted = alive & (words != Vocabulary.end_id)
        if t < max_len:
            tokens[:, t] = torch.where(emitted, words, 0)
        lengths += emitted.long()
        alive = emitted
        if not bool(alive.any()):
            break
        logits, state = model.step(words.to(features.device), state)
    return tokens, lengths


def sequence_log_probs(
    model: MultimodalRNN, features: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor, max_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities (with gradient) of each word and the END of the captions ``tokens``/``lengths``
    under the decoders' distribution: ``(logp [n, T+1], mask [n, T+1])``, where the mask marks the
    positions that were a choice (a forced END after ``max_len`` words is not)."""
    n, width = tokens.shape
    device = features.device
    inputs = torch.full((n, width + 1), Vocabulary.pad_id, dtype=torch.long)
    inputs[:, 0] = Vocabulary.start_id
    inputs[:, 1:] = tokens
    targets = torch.cat([tokens, torch.zeros(n, 1, dtype=torch.long)], dim=1)
    position = torch.arange(width + 1)[None, :].expand(n, -1)
    targets = torch.where(position == lengths[:, None], Vocabulary.end_id, targets)
    real = position <= lengths[:, None]
    hidden = model.hidden_states(features, inputs.to(device))[real.to(device)]
    logp = _constrained(model.output(model.dropout(hidden)), position[real].to(device), max_len)
    picked = logp.gather(1, targets[real].to(device)[:, None])[:, 0]
    out = torch.zeros(n, width + 1, device=device)
    out[real.to(device)] = picked
    mask = real & (position < max_len)  # the word after max_len words is END with probability 1
    return out, mask.to(device)


@dataclass
class SCSTStats:
    """What one SCST step measured (CIDEr-D on pycocoevalcap's x10 scale)."""

    reward: float  # mean reward of the samples
    baseline: float  # mean baseline
    greedy_reward: float | None  # mean reward of the greedy captions (the greedy baseline only)
    sample_words: float  # mean sample length


def scst_loss(
    model: MultimodalRNN,
    features: torch.Tensor,
    images: torch.Tensor,
    reward: CiderD,
    samples: int,
    baseline: str,
    max_len: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, SCSTStats]:
    """The SCST loss of a batch of images (``features [n, D]``; ``images [n]`` index ``reward``'s
    references): ``samples`` captions per image, advantages against ``baseline`` (module doc)."""
    if baseline not in BASELINES:
        raise VsekitError(f"unknown SCST baseline {baseline!r}; known: {', '.join(BASELINES)}")
    if baseline == "mean" and samples < 2:
        raise VsekitError("the 'mean' baseline needs at least 2 samples per image")
    n = features.shape[0]
    repeated = features.repeat_interleave(samples, dim=0)
    tokens, lengths = sample_tokens(model, repeated, max_len, generator)
    rewards = reward.score(images.repeat_interleave(samples), tokens, lengths).view(n, samples)
    greedy_reward = None
    if baseline == "greedy":
        g_tokens, g_lengths = sample_tokens(model, features, max_len, greedy=True)
        greedy_scores = reward.score(images, g_tokens, g_lengths)
        base = greedy_scores[:, None].expand(n, samples)
        greedy_reward = float(greedy_scores.mean())
    else:
        base = (rewards.sum(dim=1, keepdim=True) - rewards) / (samples - 1)
    advantage = (rewards - base).flatten().float().to(features.device)
    logp, mask = sequence_log_probs(model, repeated, tokens, lengths, max_len)
    loss = -(advantage[:, None] * logp * mask).sum() / mask.sum().clamp_min(1)
    stats = SCSTStats(
        float(rewards.mean()), float(base.mean()), greedy_reward, float(lengths.double().mean())
    )
    return loss, stats
