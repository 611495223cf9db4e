"""The image-sentence score of region-word alignment (Karpathy & Fei-Fei 2015, Eq. 7-8).

With ``v_i`` the projected regions of image k and ``s_t`` the words of sentence l (both h-dimensional):

    Eq. 8 ("max"):      S_kl = sum_t max_i v_i . s_t         every word aligns to its best region
    Eq. 7 ("sum_pos"):  S_kl = sum_t sum_i max(0, v_i . s_t)  DeFrag's sum of positive parts

Both are computed for every pair of a set of images and a set of sentences as matrix work: one product
of all regions of a block of images with all words of all sentences (no padding: the words are packed),
a max (or positive sum) over each image's regions, and a sum over each sentence's words by scatter-add.
Image blocks bound the memory, so ranking 1,000 images x 5,000 sentences takes seconds.
"""

from __future__ import annotations

import torch

__all__ = ["SCORES", "alignment_scores", "word_region_dots"]

SCORES = ("max", "sum_pos")


def word_region_dots(regions: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    """``v_i . s_t`` for every region of every image and every word: ``[n_images, R, n_words]``."""
    n, r, h = regions.shape
    return (regions.reshape(n * r, h) @ words.T).view(n, r, words.shape[0])


def alignment_scores(
    regions: torch.Tensor,
    words: torch.Tensor,
    sentence: torch.Tensor,
    n_sentences: int,
    score: str = "max",
    max_elements: int = 1 << 24,
) -> torch.Tensor:
    """``S[k, l]`` for every image ``k`` and sentence ``l``: ``[n_images, n_sentences]``.

    Args:
        regions: ``[n_images, R, h]`` region vectors ``v_i`` (Eq. 1).
        words: ``[n_words, h]`` word vectors ``s_t`` of all sentences, packed (no padding).
        sentence: ``[n_words]`` the sentence (0 .. n_sentences-1) each word belongs to.
        n_sentences: the number of sentences (a sentence with no words scores 0).
        score: ``"max"`` (Eq. 8) or ``"sum_pos"`` (Eq. 7).
        max_elements: the largest ``images x R x words`` block computed at once (memory bound).

    Differentiable (training uses it on a batch); under ``torch.no_grad`` it is the ranking path.
    """
    if score not in SCORES:
        raise ValueError(f"unknown alignment score {score!r}; known: {', '.join(SCORES)}")
    n, r, _ = regions.shape
    block = max(1, max_elements // max(1, r * words.shape[0]))
    rows = []
    for start in range(0, n, block):
        dots = word_region_dots(regions[start : start + block], words)  # [b, R, n_words]
        per_word = dots.amax(dim=1) if score == "max" else dots.clamp(min=0).sum(dim=1)  # [b, n_words]
        out = per_word.new_zeros(per_word.shape[0], n_sentences)
        rows.append(out.index_add(1, sentence, per_word))  # sum over each sentence's words
    return torch.cat(rows) if rows else regions.new_zeros(0, n_sentences)
