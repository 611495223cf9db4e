"""ContrastiveLoss (Kiros et al. 2014, Eq. 6; VSE++ hardest negative) against loops and hand values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vsekit.embedding.losses import ContrastiveLoss
from vsekit.metrics.ranking import positives_from_ids, ranking_metrics


def brute_loss(
    im: torch.Tensor, cap: torch.Tensor, ids: list[int], margin: float, max_violation: bool
) -> float:
    """Eq. 6 written out: every pair b is an anchor; k is contrastive iff its image id differs."""
    total = 0.0
    for b in range(len(ids)):
        pos = float(im[b] @ cap[b])
        neg = [k for k in range(len(ids)) if ids[k] != ids[b]]
        cap_terms = [max(0.0, margin - pos + float(im[b] @ cap[k])) for k in neg]
        img_terms = [max(0.0, margin - pos + float(im[k] @ cap[b])) for k in neg]
        if max_violation:
            total += max(cap_terms, default=0.0) + max(img_terms, default=0.0)
        else:
            total += sum(cap_terms) + sum(img_terms)
    return total


@pytest.mark.parametrize("max_violation", [False, True])
@pytest.mark.parametrize("seed", range(10))
def test_matches_brute_force(seed: int, max_violation: bool) -> None:
    g = torch.Generator().manual_seed(seed)
    batch, dim = 12, 5
    ids = torch.randint(0, 7, (batch,), generator=g)  # duplicates likely: several captions of one image
    im = F.normalize(torch.randn(batch, dim, generator=g, dtype=torch.float64), dim=1)
    im = im[ids]  # a repeated id means a repeated image embedding, as in a real batch
    cap = F.normalize(torch.randn(batch, dim, generator=g, dtype=torch.float64), dim=1)
    margin = [0.2, 0.5, 1.0][seed % 3]
    loss = ContrastiveLoss(margin=margin, max_violation=max_violation)(im, cap, ids)
    assert loss.item() == pytest.approx(brute_loss(im, cap, ids.tolist(), margin, max_violation), rel=1e-12)


def test_repeated_image_is_not_its_own_negative() -> None:
    # images 0 and 1 are the same image (id 7) with two different captions; image 2 is another one.
    e1, e2 = [1.0, 0.0], [0.0, 1.0]
    im = torch.tensor([e1, e1, e2], dtype=torch.float64)
    cap = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.8, 0.6]], dtype=torch.float64)
    ids = torch.tensor([7, 7, 9])
    # scores = [[1, .6, .8], [1, .6, .8], [0, .8, .6]]; positives s00 = 1, s11 = .6, s22 = .6; margin .2
    # anchor 0 (negative 2 only): caption .2-1+.8 = 0, image .2-1+0 = 0
    # anchor 1 (negative 2 only): caption .2-.6+.8 = .4, image .2-.6+.8 = .4
    # anchor 2 (negatives 0, 1): captions (0, .4), images (.4, .4)
    assert ContrastiveLoss(0.2)(im, cap, ids).item() == pytest.approx(2.0)
    assert ContrastiveLoss(0.2, max_violation=True)(im, cap, ids).item() == pytest.approx(1.6)
    # The VSE++ diagonal mask would also count 0<->1 as negatives: + .2 + .6 + .2 (a 3.0 total).
    assert ContrastiveLoss(0.2)(im, cap, torch.tensor([0, 1, 2])).item() == pytest.approx(3.0)


@pytest.mark.parametrize("max_violation", [False, True])
def test_zero_when_positives_win_by_the_margin(max_violation: bool) -> None:
    emb = torch.eye(6)  # positive score 1, every negative 0: a gap of 1 > margin
    ids = torch.arange(6)
    assert ContrastiveLoss(0.2, max_violation)(emb, emb, ids).item() == 0.0
    assert ContrastiveLoss(0.99, max_violation)(emb, emb, ids).item() == 0.0
    assert ContrastiveLoss(1.5, max_violation)(emb, emb, ids).item() > 0.0


@pytest.mark.parametrize("max_violation", [False, True])
def test_gradient_flows(max_violation: bool) -> None:
    g = torch.Generator().manual_seed(0)
    raw_im = torch.randn(8, 4, generator=g, requires_grad=True)
    raw_cap = torch.randn(8, 4, generator=g, requires_grad=True)
    loss = ContrastiveLoss(0.2, max_violation)(
        F.normalize(raw_im, dim=1), F.normalize(raw_cap, dim=1), torch.tensor([0, 0, 1, 2, 3, 4, 5, 6])
    )
    loss.backward()
    for grad in (raw_im.grad, raw_cap.grad):
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_bad_inputs() -> None:
    loss = ContrastiveLoss()
    with pytest.raises(ValueError, match="image_ids"):
        loss(torch.zeros(3, 2), torch.zeros(3, 2), torch.arange(2))
    with pytest.raises(ValueError, match=r"\[B, D\]"):
        loss(torch.zeros(3, 2), torch.zeros(3, 4), torch.arange(3))
    with pytest.raises(ValueError, match="margin"):
        ContrastiveLoss(margin=-0.1)


@pytest.mark.parametrize("max_violation", [False, True])
def test_tiny_model_learns_to_rank_its_training_pairs(max_violation: bool) -> None:
    """Two linear maps into a joint space, trained with the loss, must rank every training pair first.

    48 images with 2 captions each; a caption's features are a fixed random linear function of its
    image's features plus noise, so the pairs are separable but only after learning both maps (with this
    seed it takes 20-30 steps; a loss with positives and negatives swapped ends near R@1 = 60-70).
    """
    torch.manual_seed(0)
    n_img, caps_per_img, d_img, d_txt, d_emb = 48, 2, 24, 20, 16
    img_feat = torch.randn(n_img, d_img)
    mix = torch.randn(d_img, d_txt) / d_img**0.5
    cap_img = torch.arange(n_img).repeat_interleave(caps_per_img)  # image index of every caption
    cap_feat = img_feat[cap_img] @ mix + 0.5 * mix.std() * torch.randn(len(cap_img), d_txt)

    img_proj, txt_proj = torch.nn.Linear(d_img, d_emb), torch.nn.Linear(d_txt, d_emb)
    opt = torch.optim.Adam([*img_proj.parameters(), *txt_proj.parameters()], lr=1e-2)
    criterion = ContrastiveLoss(margin=0.2, max_violation=max_violation)

    def recall_at_1() -> tuple[float, float]:
        with torch.no_grad():
            im = F.normalize(img_proj(img_feat), dim=1)
            cap = F.normalize(txt_proj(cap_feat), dim=1)
        m = ranking_metrics(im @ cap.T, positives_from_ids(range(n_img), cap_img.tolist()))
        return m["i2t"]["r1"], m["t2i"]["r1"]

    assert recall_at_1() != (100.0, 100.0)  # untrained: not already solved
    for _ in range(200):
        # every batch holds each image twice (once per caption): the id mask matters here
        im = F.normalize(img_proj(img_feat[cap_img]), dim=1)
        cap = F.normalize(txt_proj(cap_feat), dim=1)
        loss = criterion(im, cap, cap_img)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert recall_at_1() == (100.0, 100.0)
