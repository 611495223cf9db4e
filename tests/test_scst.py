"""Self-critical sequence training (issue 24 item 2): the batched CIDEr-D reward equals pycocoevalcap's, the
sampler draws from exactly the distribution whose log-probabilities get the gradient, SCST raises a tiny
captioner's expected CIDEr-D on a tiny set, and a run killed at a random step resumes to the files of an
uninterrupted one."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch

from corpus_helpers import fake_image_features, write_tiny_corpus
from kill_helpers import CAPTIONER_JOB, calls_during, overlap_score, run_self_signalled, seeded_step
from test_captioning import tiny_model
from train_helpers import assert_readable_after_kill, assert_same_run, tiny_caption_config
from vsekit.captioning.captioner import load_captioner
from vsekit.captioning.decode import greedy
from vsekit.captioning.scst import sample_tokens, scst_loss, sequence_log_probs
from vsekit.captioning.trainer import CaptionTrainConfig, load_caption_recipe, train_captioner
from vsekit.data import load_corpus
from vsekit.data.vocab import tokenize
from vsekit.errors import VsekitError
from vsekit.metrics.cider_reward import CiderD
from vsekit.metrics.diversity import caption_diversity
from vsekit.resources import sample_data_path

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- the reward -----------------------------------------------------------------------------------------


def _sample_refs():
    by_image = {
        i: [tokenize(t) for t in caps]
        for i, caps in load_corpus(sample_data_path()).captions_by_image().items()
    }
    words = sorted({w for caps in by_image.values() for cap in caps for w in cap})
    wid = {w: k for k, w in enumerate(words)}
    refs = [[[wid[w] for w in cap] for cap in caps] for caps in by_image.values()]
    return list(by_image.values()), words, wid, refs


def _pad(captions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.zeros(len(captions), max(1, max(map(len, captions))), dtype=torch.long)
    for row, c in enumerate(captions):
        tokens[row, : len(c)] = torch.tensor(c, dtype=torch.long)
    return tokens, torch.tensor([len(c) for c in captions])


def test_batched_cider_d_equals_pycocoevalcap_per_caption():
    from pycocoevalcap.cider.cider_scorer import CiderScorer

    by_image, words, wid, refs = _sample_refs()
    rng = random.Random(0)
    cands = []  # (image, words): its own reference, another image's, word salad, a repeated word, nothing
    for k, caps in enumerate(by_image):
        cands += [(k, caps[0]), (k, by_image[(k + 1) % len(by_image)][1])]
        cands += [(k, [rng.choice(words) for _ in range(rng.randint(1, 15))]), (k, ["a"] * rng.randint(1, 5))]
        cands.append((k, []))
    scorer = CiderScorer(n=4, sigma=6.0)
    for caps in by_image:  # the document frequencies of the 100 images, once each
        scorer += ("", [" ".join(c) for c in caps])
    scorer.compute_doc_freq()
    df = dict(scorer.document_frequency)

    class Images(list):  # pycocoevalcap's ref_len is log(len(crefs)): the 100 images, not the candidates
        def __len__(self) -> int:
            return len(by_image)

    one = CiderScorer(n=4, sigma=6.0)
    for k, cand in cands:
        one += (" ".join(cand), [" ".join(c) for c in by_image[k]])
    one.document_frequency = defaultdict(float, df)
    one.crefs = Images(one.crefs)
    expected = one.compute_cider()
    tokens, lengths = _pad([[wid[w] for w in c] for _, c in cands])
    got = CiderD(refs).score(torch.tensor([k for k, _ in cands]), tokens, lengths)
    assert got.numpy() == pytest.approx(np.array(expected), abs=1e-9)
    assert got[0] > 1.0 and got[4] == 0.0  # a reference of the image scores high, an empty caption 0


def test_document_frequencies_come_from_the_given_captions():
    refs = [[[1, 2, 3], [1, 2, 4]], [[1, 5, 6], [7, 8]]]
    plain = CiderD(refs)
    assert torch.equal(
        plain.score(torch.tensor([0]), *_pad([[1, 2, 3]])),
        CiderD(refs, df_references=refs).score(torch.tensor([0]), *_pad([[1, 2, 3]])),
    )
    # word 1 is in every image of the df captions: it weighs nothing, so "1" alone scores 0
    df_refs = [[[1, 9]], [[1]], [[1, 2]]]
    assert float(CiderD(refs, df_references=df_refs).score(torch.tensor([0]), *_pad([[1]]))) == 0.0
    assert float(plain.score(torch.tensor([1]), *_pad([[5, 6]]))) > 0.0
    with pytest.raises(VsekitError, match="word ids must be in 0..9"):
        CiderD(refs, max_id=9).score(torch.tensor([0]), *_pad([[10]]))
    with pytest.raises(VsekitError, match="image index out of range"):
        plain.score(torch.tensor([2]), *_pad([[1]]))
    with pytest.raises(VsekitError, match="at least one reference"):
        CiderD([[[1]], []])


def test_caption_diversity_counts_the_failures_of_cider_optimisation():
    d = caption_diversity(["a dog runs", "a dog runs", "a man on a a", "two kids with"])
    assert d == {
        "mean_words": 3.5,
        "distinct_pct": 75.0,
        "vocab_used": 8.0,
        "repeat_end_pct": 25.0,
        "dangling_end_pct": 50.0,  # "a a" ends in an article too
    }


# -- sampling and log-probabilities -----------------------------------------------------------------------


def test_sampler_draws_from_the_distribution_whose_log_probs_get_the_gradient():
    """Every caption of a 3-word vocabulary up to 3 words: the constrained log-probabilities sum to one
    over all of them, and 20,000 seeded draws hit each with that frequency."""
    model = tiny_model("lstm", vocab_size=7, seed=3)
    with torch.no_grad():
        model.output.weight.div_(10)  # a flatter model: every caption has a visible probability
    feat = torch.randn(1, 6)
    max_len = 3
    seqs = [list(c) for n in range(1, max_len + 1) for c in itertools.product([4, 5, 6], repeat=n)]
    tokens, lengths = _pad(seqs)
    logp, mask = sequence_log_probs(model, feat.expand(len(seqs), -1), tokens, lengths, max_len)
    prob = (logp * mask).sum(dim=1).exp().detach()
    assert float(prob.sum()) == pytest.approx(1.0, abs=1e-5)
    n = 20_000
    drawn, drawn_len = sample_tokens(model, feat.expand(n, -1), max_len, torch.Generator().manual_seed(0))
    counts = Counter(tuple(drawn[i, : drawn_len[i]].tolist()) for i in range(n))
    empirical = torch.tensor([counts[tuple(s)] / n for s in seqs])
    assert float((empirical - prob).abs().max()) < 0.01
    again, _ = sample_tokens(model, feat.expand(n, -1), max_len, torch.Generator().manual_seed(0))
    assert torch.equal(drawn, again)


@pytest.mark.parametrize("cell", ["lstm", "rnn"])
def test_greedy_tokens_are_the_greedy_decoder_s(cell):
    model = tiny_model(cell, vocab_size=14)
    features = torch.randn(9, 6) * 3
    tokens, lengths = sample_tokens(model, features, 8, greedy=True)
    got = [tuple(tokens[i, : lengths[i]].tolist()) for i in range(9)]
    assert got == [c.tokens for c in greedy(model, features, max_len=8)]
    assert bool((tokens[torch.arange(8)[None, :].expand(9, -1) >= lengths[:, None]] == 0).all())


def test_scst_loss_gradient_pushes_up_captions_better_than_the_baseline():
    """One image, references = one caption: after one step on the SCST loss (mean baseline) the
    captions that scored above the mean are more likely, those below less."""
    torch.manual_seed(0)
    model = tiny_model("lstm", vocab_size=9, seed=1)
    with torch.no_grad():
        model.output.weight.div_(20)
    reward = CiderD([[[4, 5, 6]], [[7, 8]]])
    feats = torch.randn(1, 6)
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state()
    loss, stats = scst_loss(model, feats, torch.tensor([0]), reward, 16, "mean", 4, gen)
    gen.set_state(state)
    tokens, lengths = sample_tokens(model, feats.expand(16, -1), 4, gen)
    rewards = reward.score(torch.zeros(16, dtype=torch.long), tokens, lengths)
    assert stats.reward == pytest.approx(float(rewards.mean()))
    before = (lambda lp, m: (lp * m).sum(1))(
        *sequence_log_probs(model, feats.expand(16, -1), tokens, lengths, 4)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        after = (lambda lp, m: (lp * m).sum(1))(
            *sequence_log_probs(model, feats.expand(16, -1), tokens, lengths, 4)
        )
    up = after - before.detach()
    advantage = rewards - rewards.mean()
    assert float((advantage * up).sum()) > 0  # first order: the step follows the advantage
    assert float(up[advantage > 0].mean()) > 0 > float(up[advantage < 0].mean())


# -- the trainer --------------------------------------------------------------------------------------------


def cider_fn(predictions, references):
    """Real CIDEr-D (pycocoevalcap, vsekit's tokenizer, no Java) x100 as the selection score."""
    from pycocoevalcap.cider.cider import Cider

    gts = {i: [" ".join(tokenize(r)) for r in references[i]] for i in predictions}
    res = {i: [" ".join(tokenize(p))] for i, p in predictions.items()}
    return {"cider": 100.0 * float(Cider().compute_score(gts, res)[0]), "bleu4": 0.0}


def _xent_captioner(root: Path, corpus, epochs: int = 25) -> Path:
    config = tiny_caption_config(epochs=epochs, patience=None, dev_split="train")
    kw = {"progress": False, "device": "cpu", "feature_fn": fake_image_features, "log": lambda s: None}
    train_captioner(corpus, config, root / "xent", score_fn=cider_fn, **kw)
    return root / "xent" / "captioner.safetensors"


def _expected_cider(path: Path, corpus, samples: int = 32) -> float:
    """Mean CIDEr-D (training document frequencies) of ``samples`` captions drawn per training image."""
    captioner = load_captioner(path)
    train = corpus.split("train")
    index = {w: i for i, w in enumerate(captioner.vocab.words)}
    refs = [
        [[index.setdefault(w, len(index)) for w in tokenize(c)] for c in caps]
        for caps in train.captions_by_image().values()
    ]
    scorer = CiderD(refs, max_id=len(index) - 1)
    feats = torch.as_tensor(fake_image_features(corpus, train.image_ids())[0])
    gen = torch.Generator().manual_seed(1)
    tokens, lengths = sample_tokens(captioner.model, feats.repeat_interleave(samples, 0), 20, gen)
    images = torch.arange(len(refs)).repeat_interleave(samples)
    return float(scorer.score(images, tokens, lengths).mean())


def _scst_config(init: Path, **overrides) -> CaptionTrainConfig:
    fields = {"objective": "scst", "init_from": str(init), "batch_size": 2, "lr": 3e-3, "dev_split": "train"}
    return tiny_caption_config(**{**fields, "patience": None, **overrides})


def test_scst_raises_the_expected_cider_of_a_tiny_captioner(tmp_path):
    corpus = load_corpus(write_tiny_corpus(tmp_path / "corpus", 16, 6, 6))
    init = _xent_captioner(tmp_path, corpus)
    config = _scst_config(init, epochs=10, scst_baseline="mean", scst_samples=8)
    summary = train_captioner(
        corpus, config, tmp_path / "scst", progress=False, device="cpu", feature_fn=fake_image_features,
        score_fn=cider_fn, log=lambda s: None,
    )  # fmt: skip
    log = summary["history"]
    assert [e["epoch"] for e in log] == list(range(1, 11)) and all("train_reward" in e for e in log)
    last = tmp_path / "last.safetensors"
    from vsekit.captioning.captioner import save_captioner
    from vsekit.training.checkpoint import read_checkpoint

    captioner = load_captioner(init)
    captioner.model.load_state_dict(
        read_checkpoint(tmp_path / "scst" / "checkpoint.pt", "captioner")["model"]
    )
    save_captioner(captioner, last)
    before, after = _expected_cider(init, corpus), _expected_cider(last, corpus)
    assert after > 1.15 * before, (before, after)
    meta = load_captioner(summary["model_path"]).meta
    assert meta["init"]["from"] == str(init) and meta["recipe"]["objective"] == "scst"


def test_scst_recipe_and_its_errors(tmp_path):
    recipe = load_caption_recipe("mrnn-lstm-effnet-scst")
    assert (recipe.objective, recipe.init_from, recipe.validation_slice) == (
        "scst",
        "captioner",
        "flickr8k-val1000",
    )
    assert (recipe.train_split, recipe.dev_split) == ("train-minus-val1000", "val1000")
    with pytest.raises(VsekitError, match="init_from"):
        CaptionTrainConfig(objective="scst").validate()
    with pytest.raises(VsekitError, match="scst_samples"):
        CaptionTrainConfig(objective="scst", init_from="x", scst_baseline="mean", scst_samples=1).validate()
    corpus = load_corpus(write_tiny_corpus(tmp_path / "corpus", 16, 6, 6))
    init = _xent_captioner(tmp_path, corpus, epochs=1)
    kw = {"progress": False, "device": "cpu", "feature_fn": fake_image_features, "score_fn": cider_fn}
    with pytest.raises(VsekitError, match="hidden_dim=24; the recipe says 32"):
        train_captioner(corpus, _scst_config(init, hidden_dim=32), tmp_path / "bad", **kw)
    # a recipe naming a validation slice must train on the rest of train and select on the slice
    with pytest.raises(VsekitError, match="field 'dev_split' must be 'val1000'"):
        train_captioner(corpus, _scst_config(init, validation_slice="flickr8k-val1000"), tmp_path / "s", **kw)


def test_scst_killed_at_a_random_step_resumes_to_the_uninterrupted_run(tmp_path):
    data = write_tiny_corpus(tmp_path / "corpus", 16, 6, 6)
    corpus = load_corpus(data)
    init = _xent_captioner(tmp_path, corpus, epochs=3)
    config = _scst_config(init, epochs=4, batch_size=4, scst_samples=3)

    def run(out: Path):
        train_captioner(
            corpus, config, out, resume=True, progress=False, device="cpu",
            feature_fn=fake_image_features, score_fn=overlap_score, log=lambda s: None,
        )  # fmt: skip

    steps = calls_during(lambda: run(tmp_path / "full"))
    step = seeded_step(24, steps // config.epochs + 1, steps)
    args = [str(data), str(tmp_path / "killed"), json.dumps(config.to_dict())]
    status, stderr = run_self_signalled(CAPTIONER_JOB, args, step)
    assert status == -9, f"not killed at step {step} of {steps}: {stderr[-500:]}"
    assert (tmp_path / "killed" / "checkpoint.pt").exists()
    assert_readable_after_kill(tmp_path / "killed", "captioner")
    init.unlink()  # a resumed run reads its own copy of the captioner it started from
    run(tmp_path / "killed")
    assert_same_run(tmp_path / "full", tmp_path / "killed", "captioner.safetensors", "captioner")
