"""Ranking losses on score matrices, for the joint image-sentence embedding.

The loss takes ``scores[i, j]``, the score of image ``i`` against caption ``j`` of a batch whose pair ``b``
is ``(image b, caption b)``, and the image id of each pair. Any scorer can feed it: the cosine of
unit-norm embeddings (Kiros et al. 2014) through :class:`ContrastiveLoss`, or an alignment score such as
Karpathy & Fei-Fei's S_kl (Eq. 8) computed for every image-sentence pair of the batch.

Beside the hinge losses, :class:`InfoNCELoss` is the symmetric cross-entropy over the batch's similarity
matrix (InfoNCE, van den Oord et al. 2018; in its symmetric image-text form, CLIP, Radford et al. 2021),
with a learned temperature.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["ContrastiveLoss", "InfoNCELoss", "hinge_ranking_loss", "info_nce_loss"]


def hinge_ranking_loss(
    scores: torch.Tensor, image_ids: torch.Tensor, margin: float = 0.2, max_violation: bool = False
) -> torch.Tensor:
    """Pairwise hinge ranking loss with in-batch contrastive examples (Kiros et al. 2014, Eq. 6).

    Every pair ``b`` of the batch is an anchor; the other items are its contrastive examples::

        sum_b [ sum_k max(0, margin - s[b, b] + s[b, k])      # contrastive captions k
              + sum_k max(0, margin - s[b, b] + s[k, b]) ]    # contrastive images  k

    Negatives are masked by *image id*, not by position: if ``image_ids[k] == image_ids[b]`` (the same
    image with another of its captions, or ``k == b``), ``k`` is no contrastive example of ``b`` in either
    direction. VSE++'s diagonal-only mask marks those true pairs as negatives and so pushes two correct
    captions of one image apart whenever the image appears twice in a batch.

    ``max_violation=True`` is the VSE++ hardest-negative variant: the max over the valid negatives of
    each sum instead of the sum (0 when a pair has no valid negative in the batch).

    Reduction: the sum over the batch, as in both papers (Eq. 6 sums over pairs). The loss, and so the
    effective learning rate, therefore grows with the batch size; divide by the batch size at the call
    site for a per-pair mean.

    Args:
        scores: ``[B, B]``; ``scores[i, j]`` is the score of image ``i`` against caption ``j``.
        image_ids: ``[B]`` integer image ids of the pairs; equal ids mean the same image.
        margin: the hinge margin (>= 0).
        max_violation: hardest negative instead of the sum over negatives.

    Returns:
        A scalar tensor: the summed hinge loss.
    """
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores must be a square [B, B] matrix, got {tuple(scores.shape)}")
    image_ids = torch.as_tensor(image_ids, device=scores.device)
    if image_ids.shape != (scores.shape[0],):
        raise ValueError(f"image_ids must have shape [{scores.shape[0]}], got {tuple(image_ids.shape)}")
    if image_ids.is_floating_point() or image_ids.is_complex():
        raise ValueError(f"image_ids must be integer ids, got dtype {image_ids.dtype}")

    positive = scores.diagonal()  # s(x_b, v_b)
    # Kiros et al. 2014, Eq. 6: max{0, a - s(x, v) + s(x, v_k)} + max{0, a - s(v, x) + s(v, x_k)}.
    # cost_caption[b, k]: anchor image b against contrastive caption k.
    cost_caption = (margin - positive[:, None] + scores).clamp(min=0)
    # cost_image[k, b]: anchor caption b against contrastive image k.
    cost_image = (margin - positive[None, :] + scores).clamp(min=0)

    same_image = image_ids[:, None] == image_ids[None, :]  # symmetric; includes the diagonal
    cost_caption = cost_caption.masked_fill(same_image, 0.0)
    cost_image = cost_image.masked_fill(same_image, 0.0)

    if max_violation:
        # Hinge terms are >= 0, so with masked entries at 0 the max is over the valid negatives.
        return cost_caption.amax(dim=1).sum() + cost_image.amax(dim=0).sum()
    return cost_caption.sum() + cost_image.sum()


class ContrastiveLoss(nn.Module):
    """:func:`hinge_ranking_loss` on the cosine scores of unit-normalised embeddings, ``s(x, v) = x . v``."""

    def __init__(self, margin: float = 0.2, max_violation: bool = False) -> None:
        super().__init__()
        if margin < 0:
            raise ValueError(f"margin must be >= 0, got {margin}")
        self.margin = float(margin)
        self.max_violation = bool(max_violation)

    def extra_repr(self) -> str:
        return f"margin={self.margin}, max_violation={self.max_violation}"

    def forward(
        self, image_emb: torch.Tensor, caption_emb: torch.Tensor, image_ids: torch.Tensor
    ) -> torch.Tensor:
        """Loss of a batch of ``B`` pairs ``(image_emb[b], caption_emb[b])``, both ``[B, D]`` and
        unit-normalised (row ``b`` may repeat an image); ``image_ids`` ``[B]`` as in
        :func:`hinge_ranking_loss`."""
        if image_emb.ndim != 2 or caption_emb.shape != image_emb.shape:
            raise ValueError(
                f"image_emb and caption_emb must both be [B, D]; got {tuple(image_emb.shape)} and "
                f"{tuple(caption_emb.shape)}"
            )
        return self.score_loss(image_emb @ caption_emb.T, image_ids)

    def score_loss(self, scores: torch.Tensor, image_ids: torch.Tensor) -> torch.Tensor:
        """The same loss on a precomputed score matrix (any scorer)."""
        return hinge_ranking_loss(scores, image_ids, self.margin, self.max_violation)


def info_nce_loss(scores: torch.Tensor, image_ids: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE over a batch's score matrix (CLIP, Radford et al. 2021, Fig. 3)::

        1/2 [ mean_b -log softmax_k(s[b, k] / t)[b]     # image b against the batch's captions
            + mean_b -log softmax_k(s[k, b] / t)[b] ]   # caption b against the batch's images

    As in :func:`hinge_ranking_loss`, negatives are masked by image id: another caption of image ``b``
    (or ``b``'s image seen again) is left out of ``b``'s softmax, never pushed away. Reduction: the mean
    over the batch (CLIP's), so the loss does not grow with the batch size.

    Args:
        scores: ``[B, B]``; ``scores[i, j]`` is the score of image ``i`` against caption ``j``.
        image_ids: ``[B]`` integer image ids of the pairs.
        temperature: a positive scalar tensor ``t`` (gradients flow into it).
    """
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores must be a square [B, B] matrix, got {tuple(scores.shape)}")
    image_ids = torch.as_tensor(image_ids, device=scores.device)
    if image_ids.shape != (scores.shape[0],):
        raise ValueError(f"image_ids must have shape [{scores.shape[0]}], got {tuple(image_ids.shape)}")
    n = scores.shape[0]
    same_image = image_ids[:, None] == image_ids[None, :]
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=scores.device)
    logits = (scores / temperature).masked_fill(same_image & off_diagonal, float("-inf"))
    target = torch.arange(n, device=scores.device)
    return 0.5 * (nn.functional.cross_entropy(logits, target) + nn.functional.cross_entropy(logits.T, target))


class InfoNCELoss(nn.Module):
    """:func:`info_nce_loss` on cosine scores, with a learned temperature.

    The temperature is learned as ``log t`` (a positive ``t`` whatever the step, and steps scale with it,
    as CLIP learns its logit scale in log space) and clamped to ``[min_temperature, max_temperature]``
    where it is used (CLIP clamps the logit scale 1/t at 100, i.e. t >= 0.01), so a runaway value cannot
    make the logits overflow. Its parameter ``log_temperature`` must be handed to the optimizer.
    """

    def __init__(
        self, temperature: float = 0.07, min_temperature: float = 0.01, max_temperature: float = 1.0
    ) -> None:
        super().__init__()
        if not 0 < min_temperature <= temperature <= max_temperature:
            raise ValueError(
                f"need 0 < min_temperature <= temperature <= max_temperature, got {min_temperature}, "
                f"{temperature}, {max_temperature}"
            )
        self.log_temperature = nn.Parameter(torch.tensor(math.log(temperature)))
        self.log_min, self.log_max = math.log(min_temperature), math.log(max_temperature)

    @property
    def temperature(self) -> float:
        """The temperature the loss uses now (after clamping)."""
        return float(self.log_temperature.detach().clamp(self.log_min, self.log_max).exp())

    def forward(
        self, image_emb: torch.Tensor, caption_emb: torch.Tensor, image_ids: torch.Tensor
    ) -> torch.Tensor:
        """Loss of a batch of unit-normalised ``[B, D]`` pairs, as :meth:`ContrastiveLoss.forward`."""
        if image_emb.ndim != 2 or caption_emb.shape != image_emb.shape:
            raise ValueError(
                f"image_emb and caption_emb must both be [B, D]; got {tuple(image_emb.shape)} and "
                f"{tuple(caption_emb.shape)}"
            )
        return self.score_loss(image_emb @ caption_emb.T, image_ids)

    def score_loss(self, scores: torch.Tensor, image_ids: torch.Tensor) -> torch.Tensor:
        """The same loss on a precomputed score matrix."""
        t = self.log_temperature.clamp(self.log_min, self.log_max).exp()
        return info_nce_loss(scores, image_ids, t)
