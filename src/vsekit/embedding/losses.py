"""Ranking losses for the joint image-sentence embedding."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ContrastiveLoss"]


class ContrastiveLoss(nn.Module):
    """Pairwise hinge ranking loss with in-batch contrastive examples (Kiros et al. 2014, Eq. 6).

    For unit-normalised embeddings the score is the cosine ``s(x, v) = x . v``. Every pair ``b`` of the
    batch (``image_emb[b]`` described by ``caption_emb[b]``) is an anchor; the other items of the batch
    are its contrastive examples::

        sum_b [ sum_k max(0, margin - s(x_b, v_b) + s(x_b, v_k))      # contrastive captions v_k
              + sum_k max(0, margin - s(x_b, v_b) + s(x_k, v_b)) ]    # contrastive images  x_k

    Negatives are masked by *image id*, not by position: if ``image_ids[k] == image_ids[b]`` (the same
    image with another of its captions, or ``k == b``), ``k`` is no contrastive example of ``b`` in either
    direction. VSE++'s diagonal-only mask marks those true pairs as negatives and so pushes two correct
    captions of one image apart whenever the image appears twice in a batch.

    ``max_violation=True`` is the VSE++ hardest-negative variant: the max over the valid negatives of
    each sum instead of the sum (0 when a pair has no valid negative in the batch).

    Reduction: the sum over the batch, as in both papers (Eq. 6 sums over pairs). The loss, and so the
    effective learning rate, therefore grows with the batch size; divide by the batch size at the call
    site for a per-pair mean.
    """

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
        """Loss of a batch of ``B`` pairs.

        Args:
            image_emb: ``[B, D]`` unit-normalised image embeddings (row ``b`` may repeat an image).
            caption_emb: ``[B, D]`` unit-normalised caption embeddings; pair ``b`` is
                ``(image_emb[b], caption_emb[b])``.
            image_ids: ``[B]`` integer image ids; equal ids mean the same image.

        Returns:
            A scalar tensor: the summed hinge loss.
        """
        if image_emb.ndim != 2 or caption_emb.shape != image_emb.shape:
            raise ValueError(
                f"image_emb and caption_emb must both be [B, D]; got {tuple(image_emb.shape)} and "
                f"{tuple(caption_emb.shape)}"
            )
        image_ids = torch.as_tensor(image_ids, device=image_emb.device)
        if image_ids.shape != (image_emb.shape[0],):
            raise ValueError(
                f"image_ids must have shape [{image_emb.shape[0]}], got {tuple(image_ids.shape)}"
            )
        if image_ids.is_floating_point() or image_ids.is_complex():
            raise ValueError(f"image_ids must be integer ids, got dtype {image_ids.dtype}")

        scores = image_emb @ caption_emb.T  # scores[i, j] = s(x_i, v_j)
        positive = scores.diagonal()  # s(x_b, v_b)
        # Kiros et al. 2014, Eq. 6: max{0, a - s(x, v) + s(x, v_k)} + max{0, a - s(v, x) + s(v, x_k)}.
        # cost_caption[b, k]: anchor image b against contrastive caption k.
        cost_caption = (self.margin - positive[:, None] + scores).clamp(min=0)
        # cost_image[k, b]: anchor caption b against contrastive image k.
        cost_image = (self.margin - positive[None, :] + scores).clamp(min=0)

        same_image = image_ids[:, None] == image_ids[None, :]  # symmetric; includes the diagonal
        cost_caption = cost_caption.masked_fill(same_image, 0.0)
        cost_image = cost_image.masked_fill(same_image, 0.0)

        if self.max_violation:
            # Hinge terms are >= 0, so with masked entries at 0 the max is over the valid negatives.
            return cost_caption.amax(dim=1).sum() + cost_image.amax(dim=0).sum()
        return cost_caption.sum() + cost_image.sum()
