"""SC-NLM (Kiros et al. 2014, sec. 2.4-2.5, 5.2): shapes, overfitting + MAP decoding, the KN trigram LM,
the repeated-word penalty, save/load. Fast (no spaCy, no shared data: a fake tagger and joint model)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from corpus_helpers import torch_threads  # tests/ is on sys.path under pytest
from vsekit.captioning.language_model import KneserNeyTrigramLM
from vsekit.captioning.scnlm import (
    SCNLM,
    RerankWeights,
    SCNLMCandidates,
    SCNLMConfig,
    count_repeats,
    load_scnlm,
    translation_score,
    tune_rerank_weights,
)
from vsekit.captioning.scnlm_trainer import (
    SCNLMTrainConfig,
    list_scnlm_recipes,
    load_scnlm_recipe,
    train_scnlm,
    train_scnlm_run,
)
from vsekit.data.corpus import Caption, Corpus
from vsekit.data.vocab import tokenize
from vsekit.errors import ConfigMismatchError, VsekitError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CAPTIONS = {
    "img1": "a black dog runs through the snow",
    "img2": "two children play on the beach",
    "img3": "a man rides a red bike down the hill",
    "img4": "a girl in a pink dress jumps into the pool",
    "img5": "the brown horse eats grass in a field",
    "img6": "three people sit on a wooden bench",
}
# A tiny fake POS lexicon: enough to give each word one tag.
LEXICON = {
    "a": "DT", "the": "DT", "two": "CD", "three": "CD", "in": "IN", "on": "IN", "through": "IN",
    "down": "IN", "into": "IN", "runs": "VBZ", "play": "VBP", "rides": "VBZ", "jumps": "VBZ",
    "eats": "VBZ", "sit": "VBP", "black": "JJ", "red": "JJ", "pink": "JJ", "brown": "JJ", "wooden": "JJ",
    "children": "NNS", "people": "NNS",
}  # fmt: skip


def fake_tagger(token_lists):
    return [[LEXICON.get(w, "NN") for w in tokens] for tokens in token_lists]


class FakeJoint(nn.Module):
    """Stands in for the joint model: a fixed random bag-of-words text encoder into 32-d unit vectors."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.embed_dim = dim
        self.image_proj = nn.Linear(4, dim)
        self.config = {"fake": True}
        self._gen = torch.Generator().manual_seed(1)
        self._words: dict[str, torch.Tensor] = {}

    def _word(self, w: str) -> torch.Tensor:
        if w not in self._words:
            self._words[w] = torch.randn(self.embed_dim, generator=self._gen)
        return self._words[w]

    def embed_texts(self, texts):
        rows = [torch.stack([self._word(w) for w in tokenize(t)]).mean(0) for t in texts]
        return F.normalize(torch.stack(rows), dim=-1)


def tiny_corpus(split: str = "train") -> Corpus:
    caps = [Caption(image_id=i, text=t, source=f"test:{n}") for n, (i, t) in enumerate(CAPTIONS.items())]
    images = {i: Path(f"/nonexistent/{i}.jpg") for i in CAPTIONS}
    return Corpus(
        root=Path("/nonexistent"),
        name="tiny",
        format="test",
        images=images,
        captions=caps,
        splits={split: list(CAPTIONS)},
    )


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    joint = FakeJoint()
    cfg = SCNLMConfig(
        word_dim=32, attr_dim=32, factors=32, context=3, forward=3, min_count=1, epochs=200,
        batch_captions=6, lr=1e-2, lr_decay=1.0, n_neighbours=2, n_templates=3, min_len=4,
    )  # fmt: skip
    with torch_threads(1):  # module fixtures run before the function-scoped one_torch_thread
        captioner = train_scnlm(tiny_corpus(), joint, cfg, out_dir=None, progress=False, tagger=fake_tagger)
    return captioner, joint


def test_corpus_helper_matches_constructor():
    corpus = tiny_corpus()
    assert len(corpus.split("train").captions) == len(CAPTIONS)


def test_shapes():
    cfg = SCNLMConfig(
        word_dim=16, attr_dim=12, factors=8, context=4, forward=3, content_dim=20, vocab_size=50, n_tags=7
    )
    model = SCNLM(cfg)
    B = 5
    ctx = torch.randint(0, 50, (B, 4))
    tags = torch.randint(0, 7, (B, 3))
    u = torch.randn(B, 20)
    assert model.folded_embeddings().shape == (50, 16)  # E^T: V x K
    assert model(ctx, tags, u).shape == (B, 50)
    templates = torch.randint(2, 7, (B, 9))
    out = model.map_decode(u, templates, torch.tensor([1, 2, 3, 4, 5]))
    assert [len(r) for r in out] == [1, 2, 3, 4, 5]
    assert all(w >= 4 for r in out for w in r)  # specials never generated


def test_overfit_and_map_decode_reproduces_captions(trained):
    captioner, joint = trained
    assert captioner.history[-1]["train_ppl"] < 1.5
    texts = [" ".join(tokenize(t)) for t in CAPTIONS.values()]
    u = joint.embed_texts(texts)
    tag_index = {t: i for i, t in enumerate(captioner.tags)}
    templates = [[tag_index[t] for t in tags] for tags in fake_tagger([x.split() for x in texts])]
    from vsekit.captioning.scnlm_net import template_tensor

    tmpl, lengths = template_tensor(templates, captioner.config.forward)
    decoded = captioner.model.map_decode(u, tmpl, lengths)
    assert [" ".join(captioner.vocab.decode(d)) for d in decoded] == texts


def test_generate_returns_ranked_unique_captions(trained):
    captioner, joint = trained
    images = joint.embed_texts([CAPTIONS["img1"], CAPTIONS["img3"]])
    cands = captioner.candidates(images)
    assert len(cands.captions) == 2 and all(
        f.shape == (len(c), 4) for c, f in zip(cands.captions, cands.features, strict=True)
    )
    out = captioner.generate(images, n_best=3)
    assert len(out) == 2 and all(1 <= len(c) <= 3 and len(set(c)) == len(c) for c in out)
    assert all(4 <= len(c.split()) <= 12 for caps in out for c in caps)


def test_kn_trigram_sums_to_one_and_hand_value():
    lm = KneserNeyTrigramLM.fit([["a", "b"], ["a", "c"]], discount=0.75)
    vocab = ["a", "b", "c", "<unk>", "</s>"]
    for ctx in [(), ("a",), ("<s>", "a"), ("a", "b"), ("b", "c"), ("zzz", "a")]:
        assert sum(lm.prob(w, ctx) for w in vocab) == pytest.approx(1.0, abs=1e-12)
    # By hand (D = 0.75, |W| = 5 predictable words):
    #   continuation counts N1+(.w): a 1 (<s> a), b 1 (a b), c 1 (a c), </s> 2 (b </s>, c </s>); total 5
    #   P1(b) = (1 - .75)/5 + .75 * 4/5 * 1/5                  = 0.17
    #   P2(b|a) = (1 - .75)/2 + .75 * 2/2 * P1(b)              = 0.2525   (N1+(.a b) = 1, N1+(.a .) = 2)
    #   P3(b|<s> a) = (1 - .75)/2 + .75 * 2/2 * P2(b|a)        = 0.314375 (c(<s> a b) = 1, c(<s> a .) = 2)
    assert lm.prob("b", ("<s>", "a")) == pytest.approx(0.314375, abs=1e-12)
    assert lm.logprob(["a", "b"]) == pytest.approx(
        math.log(lm.prob("a", ())) + math.log(0.314375) + math.log(lm.prob("</s>", ("a", "b")))
    )
    words, tri, cnt = lm.to_arrays()
    again = KneserNeyTrigramLM.from_arrays(words, tri, cnt, 0.75)
    assert again.prob("c", ("a",)) == lm.prob("c", ("a",))


def test_repeated_word_penalty():
    assert count_repeats("a dog and a dog and a dog".split()) == 2  # "a"/"and" are stopwords
    assert count_repeats("a man on a bike".split()) == 0
    assert translation_score(0.5, 0, 0.5) == 0.5
    assert translation_score(0.5, 2, 0.5) == pytest.approx(0.125)
    assert translation_score(-0.5, 1, 0.5) == pytest.approx(-1.0)  # a repeat never raises the score
    cands = SCNLMCandidates(
        [["a dog runs on a dog", "a dog runs on the grass"]],
        [np.array([[0.60, 1, -10.0, 6], [0.45, 0, -10.0, 6]])],
    )
    from vsekit.captioning.scnlm import SCNLMCaptioner

    rerank = SCNLMCaptioner.rerank
    assert rerank(None, cands, 1, RerankWeights(0.0, 0.0, 1.0)) == [["a dog runs on a dog"]]
    assert rerank(None, cands, 1, RerankWeights(0.0, 0.0, 0.5)) == [["a dog runs on the grass"]]


def test_tune_rerank_weights_picks_best(trained):
    captioner, joint = trained
    images = joint.embed_texts([CAPTIONS["img1"], CAPTIONS["img2"]])

    def score(pred, refs):  # fraction of exact matches with a reference
        return {"cider": float(np.mean([pred[i] in refs[i] for i in pred]))}

    refs = {"img1": [CAPTIONS["img1"]], "img2": [CAPTIONS["img2"]]}
    best, rows = tune_rerank_weights(
        captioner, images, ["img1", "img2"], refs, score, grid={"lm_weight": (0.0, 0.1)}
    )
    assert captioner.rerank_weights == best
    assert max(r["cider"] for r in rows) == next(
        r["cider"]
        for r in rows
        if RerankWeights(r["lm_weight"], r["length_power"], r["repeat_penalty"]) == best
    )


def test_save_load_round_trip(trained, tmp_path):
    captioner, joint = trained
    path = captioner.save(tmp_path / "m.safetensors", half=False)
    loaded = load_scnlm(path, joint)
    u = joint.embed_texts([CAPTIONS["img2"], CAPTIONS["img5"]])
    ctx, tags = torch.tensor([[2, 2, 2], [2, 2, 5]]), torch.tensor([[3, 4, 5], [4, 5, 1]])
    assert torch.equal(loaded.model(ctx, tags, u), captioner.model(ctx, tags, u))
    assert loaded.generate(u, n_best=3) == captioner.generate(u, n_best=3)
    assert loaded.rerank_weights == captioner.rerank_weights
    assert loaded.lm.trigram_counts == captioner.lm.trigram_counts
    # float16: a second save/load of the loaded model is exact
    half = load_scnlm(captioner.save(tmp_path / "h.safetensors", half=True), joint)
    again = load_scnlm(half.save(tmp_path / "h2.safetensors", half=True), joint)
    assert again.generate(u, n_best=2) == half.generate(u, n_best=2)


def test_load_errors_name_the_file(trained, tmp_path):
    captioner, joint = trained
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(VsekitError, match="bad.safetensors"):
        load_scnlm(bad)
    from safetensors.torch import save_file

    other = tmp_path / "other.safetensors"
    save_file({"x": torch.zeros(2)}, str(other), metadata={"format": "vsekit.JointEmbedding"})
    with pytest.raises(VsekitError, match="other.safetensors.*not a vsekit SC-NLM"):
        load_scnlm(other)
    with pytest.raises(VsekitError, match="missing.safetensors"):
        load_scnlm(tmp_path / "missing.safetensors")
    path = captioner.save(tmp_path / "m.safetensors")
    with pytest.raises(VsekitError, match="another joint"):
        load_scnlm(path, FakeJoint())


# -- the resumable run ------------------------------------------------------------------------------


def _scnlm_corpus() -> Corpus:
    corpus = tiny_corpus()
    ids = list(CAPTIONS)
    return Corpus(
        root=corpus.root,
        name="tiny",
        format="test",
        images=corpus.images,
        captions=corpus.captions,
        splits={"train": ids[:4], "dev": ids[4:]},
    )


RUN_CONFIG = SCNLMTrainConfig(
    word_dim=16, attr_dim=16, factors=8, context=3, forward=3, min_count=1, epochs=4, batch_captions=2,
    lr=1e-2, lr_decay=0.9, content_dropout=0.2, n_neighbours=2, n_templates=3,
)  # fmt: skip


def _joint() -> FakeJoint:
    """The same fake joint model every time (its image projection is its fingerprint)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return FakeJoint()


def _scnlm_run(out, config=RUN_CONFIG, **kw):
    return train_scnlm_run(
        _scnlm_corpus(), config, out, progress=False, device="cpu", joint_model=_joint(),
        log=lambda s: None, tagger=fake_tagger, **kw,
    )  # fmt: skip


def test_scnlm_run_resumes_bit_for_bit(tmp_path):
    full = _scnlm_run(tmp_path / "full")
    assert full["epochs_completed"] == 4 and len(full["history"]) == 4
    assert {p.name for p in (tmp_path / "full").iterdir()} >= {
        "checkpoint.pt", "log.jsonl", "config.json", "scnlm.safetensors",
    }  # fmt: skip
    _scnlm_run(tmp_path / "split", dataclasses.replace(RUN_CONFIG, epochs=2))
    with pytest.raises(VsekitError, match="--resume"):
        _scnlm_run(tmp_path / "split")
    resumed = _scnlm_run(tmp_path / "split", resume=True)
    assert resumed["epochs_completed"] == 4 and resumed["history"][-1]["epoch"] == 4
    a, b = (torch.load(tmp_path / d / "checkpoint.pt", weights_only=True) for d in ("full", "split"))
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert [e["train_ppl"] for e in full["history"]] == [e["train_ppl"] for e in resumed["history"]]
    assert resumed["best_epoch"] == full["best_epoch"] and resumed["best_dev_ppl"] == full["best_dev_ppl"]
    best = load_scnlm(tmp_path / "split" / "scnlm.safetensors", _joint())
    assert best.extra["epoch"] == full["best_epoch"]
    with pytest.raises(ConfigMismatchError, match="lr=0.01.*lr=0.02"):
        _scnlm_run(tmp_path / "split", dataclasses.replace(RUN_CONFIG, lr=2e-2), resume=True)


def test_scnlm_recipes_are_strict(tmp_path):
    assert "scnlm" in list_scnlm_recipes()
    shipped = load_scnlm_recipe("scnlm")
    assert (shipped.word_dim, shipped.factors, shipped.epochs) == (300, 100, 8)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"epochs": 2, "factorz": 8}))
    with pytest.raises(VsekitError, match=r"mine\.json: unknown field.*factorz"):
        load_scnlm_recipe(path)
    path.write_text(json.dumps({"lr": "fast"}))
    with pytest.raises(VsekitError, match=r"mine\.json: field 'lr' must be float"):
        load_scnlm_recipe(path)
    path.write_text(json.dumps({"epochs": 2}))
    assert load_scnlm_recipe(path).name == "mine"
