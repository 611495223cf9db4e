"""The multimodal RNN captioner: model, decoders, file format, nearest-neighbour baseline and trainer."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from corpus_helpers import write_tiny_corpus  # noqa: E402 - tests/ is on sys.path under pytest
from train_helpers import tiny_caption_config
from vsekit.captioning.captioner import MRNNCaptioner, load_captioner, save_captioner
from vsekit.captioning.decode import beam_search, greedy, sample
from vsekit.captioning.mrnn import MultimodalRNN, MultimodalRNNConfig, caption_batch
from vsekit.captioning.nearest import NearestNeighbourCaptioner, consensus_caption
from vsekit.captioning.trainer import (
    CaptionTrainConfig,
    length_bucketed_batches,
    load_caption_recipe,
    train_captioner,
)
from vsekit.data import load_corpus
from vsekit.data.vocab import Vocabulary
from vsekit.embedding.model import MODEL_FORMAT
from vsekit.errors import ConfigMismatchError, VsekitError

CELLS = ("lstm", "rnn")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_model(cell: str, vocab_size: int = 9, image_dim: int = 6, seed: int = 0) -> MultimodalRNN:
    torch.manual_seed(seed)
    config = MultimodalRNNConfig(
        image_dim=image_dim, vocab_size=vocab_size, cell=cell, word_dim=8, hidden_dim=12
    )
    model = MultimodalRNN(config).eval()
    with torch.no_grad():  # a peakier random model than the init, so decoders disagree when they should
        model.output.weight.mul_(20)
    return model


def teacher_forced_log_prob(
    model: MultimodalRNN, features: torch.Tensor, captions: list[list[int]]
) -> torch.Tensor:
    vocab = Vocabulary([f"w{i}" for i in range(model.config.vocab_size - 4)])
    inputs, targets = caption_batch(captions, vocab)
    with torch.no_grad():
        logp = torch.log_softmax(model(features, inputs).double(), dim=-1)
    picked = logp.gather(2, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return (picked * (targets != -100)).sum(dim=1)


@pytest.mark.parametrize("cell", CELLS)
def test_shapes_and_loss(cell):
    model = tiny_model(cell)
    features = torch.randn(3, 6)
    inputs, targets = caption_batch([[4, 5], [6], [4, 5, 6, 7]], Vocabulary(["a", "b", "c", "d", "e"]))
    assert inputs.shape == targets.shape == (3, 5)
    assert inputs[:, 0].tolist() == [Vocabulary.start_id] * 3
    assert targets[1].tolist() == [6, Vocabulary.end_id, -100, -100, -100]
    assert model(features, inputs).shape == (3, 5, 9)
    loss = model.loss(features, inputs, targets)
    assert loss.ndim == 0 and torch.isfinite(loss)
    # the masked loss equals cross-entropy over the real positions of the full logits
    full = torch.nn.functional.cross_entropy(model(features, inputs).flatten(0, 1), targets.flatten())
    assert torch.allclose(loss, full, atol=1e-6)


def test_first_step_is_eq_14_with_the_image_bias():
    """h_1 = ReLU(W_hx x_START + b_h + b_v), b_v = W_hi CNN(I) (Eq. 13-14, h_0 = 0), computed by hand."""
    model = tiny_model("rnn")
    image = torch.randn(2, 6)
    rnn = model.rnn
    x_start = model.word_embedding.weight[Vocabulary.start_id]
    b_v = image @ model.image_bias.weight.T + model.image_bias.bias
    expected = torch.relu(rnn.weight_ih_l0 @ x_start + rnn.bias_ih_l0 + rnn.bias_hh_l0 + b_v)
    _, state = model.start(image)
    assert torch.allclose(state[0][0], expected, atol=1e-6)
    # step 2 reads only the state and the word: h_2 = ReLU(W_hx x_w + W_hh h_1 + b_h), no image term
    _, state2 = model.step(torch.tensor([5, 5]), state)
    x_w = model.word_embedding.weight[5]
    h2 = torch.relu(rnn.weight_ih_l0 @ x_w + expected @ rnn.weight_hh_l0.T + rnn.bias_ih_l0 + rnn.bias_hh_l0)
    assert torch.allclose(state2[0][0], h2, atol=1e-6)


def test_output_bias_is_log_unigram_frequency():
    model = tiny_model("lstm", vocab_size=6)
    model.init_output_bias(torch.tensor([0.0, 2, 0, 2, 4, 0]))
    probs = torch.softmax(model.output.bias, dim=0)
    assert probs[4].item() == pytest.approx(0.5, abs=1e-3)
    assert probs[1].item() == pytest.approx(0.25, abs=1e-3)
    assert probs[0].item() < 1e-3


@pytest.mark.parametrize("cell", CELLS)
def test_beam_of_one_is_greedy(cell):
    model = tiny_model(cell, vocab_size=14)
    features = torch.randn(7, 6) * 3
    g = greedy(model, features, max_len=8)
    b = beam_search(model, features, beam_size=1, max_len=8)
    assert [c.tokens for c in g] == [caps[0].tokens for caps in b]
    assert [c.log_prob for c in g] == pytest.approx([caps[0].log_prob for caps in b], abs=1e-9)


@pytest.mark.parametrize("cell", CELLS)
def test_scores_are_teacher_forced_log_probabilities(cell):
    model = tiny_model(cell, vocab_size=14)
    features = torch.randn(4, 6)
    best = [caps[0] for caps in beam_search(model, features, beam_size=3, max_len=10)]
    assert all(c.tokens and len(c.tokens) <= 10 for c in best)
    expected = teacher_forced_log_prob(model, features, [list(c.tokens) for c in best])
    assert [c.log_prob for c in best] == pytest.approx(expected.tolist(), abs=1e-5)


@pytest.mark.parametrize("cell", CELLS)
def test_wide_beam_finds_the_exact_best_caption(cell):
    """Brute force: with a beam as wide as the search space, beam search returns the true argmax."""
    model = tiny_model(cell, vocab_size=7, seed=3)  # 3 real words (ids 4..6)
    features = torch.randn(3, 6) * 2
    max_len = 3
    all_captions = [list(c) for n in range(1, max_len + 1) for c in itertools.product([4, 5, 6], repeat=n)]
    exact = []
    for i in range(3):
        scores = teacher_forced_log_prob(
            model, features[i : i + 1].expand(len(all_captions), -1), all_captions
        )
        order = scores.argsort(descending=True)[:3].tolist()
        exact.append([(tuple(all_captions[j]), scores[j].item()) for j in order])
    found = beam_search(model, features, beam_size=27, max_len=max_len, n_best=3)
    for caps, truth in zip(found, exact, strict=True):
        assert [c.tokens for c in caps] == [t for t, _ in truth]
        assert [c.log_prob for c in caps] == pytest.approx([s for _, s in truth], abs=1e-6)


def repeats(tokens: tuple[int, ...], n: int) -> bool:
    grams = [tokens[i : i + n] for i in range(len(tokens) - n + 1)]
    return len(set(grams)) < len(grams)


class LoopModel:
    """A hand-made step model that loves "w4 w5 w4 w5 ...": each step's log-probabilities depend on the
    last word only (4 -> 5, 5 -> 4 best; 6 second; END last), so greedy decoding repeats itself."""

    def __init__(self) -> None:
        table = torch.full((8, 8), -9.0)
        table[:, 6], table[:, 3] = -2.0, -5.0  # w6 second best everywhere, END worst of the words
        table[2, 4] = table[5, 4] = table[6, 4] = -0.1  # after START, w5 or w6: w4
        table[4, 5] = -0.1  # after w4: w5
        self.table = torch.log_softmax(table, dim=1)

    def start(self, features):
        return self.table[[2] * len(features)], (torch.full((len(features),), 2),)

    def step(self, words, state):
        return self.table[words], (words,)

    def reorder_state(self, state, index):
        return (state[0][index],)


def test_the_repeat_guard_bars_exactly_the_repeated_ngrams_by_hand():
    features = torch.zeros(1, 6)
    assert greedy(LoopModel(), features, max_len=7)[0].tokens == (4, 5, 4, 5, 4, 5, 4)
    # trigrams: after "4 5 4 5" a 4 would say "4 5 4" again, so the second best, w6; then 4 and 5 are new
    assert greedy(LoopModel(), features, max_len=7, no_repeat_ngram=3)[0].tokens == (4, 5, 4, 5, 6, 4, 5)
    # bigrams: after "4 5 4" a 5 would say "4 5" again: w6; after w6 a 4 is new ("6 4")
    assert greedy(LoopModel(), features, max_len=5, no_repeat_ngram=2)[0].tokens == (4, 5, 4, 6, 4)
    beam = beam_search(LoopModel(), features, beam_size=1, max_len=7, no_repeat_ngram=3)
    assert beam[0][0].tokens == (4, 5, 4, 5, 6, 4, 5)


@pytest.mark.parametrize("n", [2, 3])
def test_a_wide_beam_with_the_repeat_guard_finds_the_best_caption_without_repeats(n):
    """Brute force: the argmax over every caption with no repeated n-gram."""
    model = tiny_model("lstm", vocab_size=7, seed=5)
    features = torch.randn(2, 6) * 2
    max_len = 4
    every = [c for k in range(1, max_len + 1) for c in itertools.product([4, 5, 6], repeat=k)]
    allowed = [list(c) for c in every if not repeats(c, n)]
    found = beam_search(model, features, beam_size=81, max_len=max_len, n_best=2, no_repeat_ngram=n)
    for i, caps in enumerate(found):
        scores = teacher_forced_log_prob(model, features[i : i + 1].expand(len(allowed), -1), allowed)
        best = scores.argsort(descending=True)[:2].tolist()
        assert [c.tokens for c in caps] == [tuple(allowed[j]) for j in best]
        assert not any(repeats(c.tokens, n) for c in caps)


def test_words_said_once_are_never_said_twice_by_hand_and_the_rest_may_be():
    features = torch.zeros(1, 6)
    once = torch.zeros(8, dtype=torch.bool)
    once[5] = True  # w5 at most once; w4 free
    # 4 5 4 5 ...: the second 5 is barred, so its slot takes the second best, w6 (then 4 again)
    beam = beam_search(LoopModel(), features, beam_size=1, max_len=6, once=once)
    assert beam[0][0].tokens == (4, 5, 4, 6, 4, 6)
    forced = torch.tensor([[5]])
    prefixed = beam_search(LoopModel(), features, beam_size=1, max_len=4, prefix=forced, once=once)
    assert 5 not in prefixed[0][0].tokens[1:]  # the forced first word counts as said
    with pytest.raises(VsekitError, match="once"):
        beam_search(LoopModel(), features, once=torch.zeros(9, dtype=torch.bool))


def test_a_wide_beam_with_words_said_once_finds_the_best_such_caption():
    """Brute force: the argmax over every caption that says w5 and w6 at most once."""
    model = tiny_model("lstm", vocab_size=7, seed=5)
    features = torch.randn(2, 6) * 2
    max_len = 4
    every = [c for k in range(1, max_len + 1) for c in itertools.product([4, 5, 6], repeat=k)]
    allowed = [list(c) for c in every if c.count(5) <= 1 and c.count(6) <= 1]
    once = torch.tensor([False] * 5 + [True, True])
    found = beam_search(model, features, beam_size=81, max_len=max_len, n_best=2, once=once)
    for i, caps in enumerate(found):
        scores = teacher_forced_log_prob(model, features[i : i + 1].expand(len(allowed), -1), allowed)
        best = scores.argsort(descending=True)[:2].tolist()
        assert [c.tokens for c in caps] == [tuple(allowed[j]) for j in best]


def test_length_penalty_prefers_longer_captions():
    model = tiny_model("lstm", vocab_size=14, seed=1)
    features = torch.randn(16, 6)
    plain = beam_search(model, features, beam_size=4, max_len=12)
    normed = beam_search(model, features, beam_size=4, max_len=12, length_penalty=1.0)
    assert sum(len(c[0].tokens) for c in normed) >= sum(len(c[0].tokens) for c in plain)


def test_sampling_is_seeded_and_cold_sampling_is_greedy():
    model = tiny_model("lstm", vocab_size=14)
    features = torch.randn(5, 6)
    a = sample(model, features, temperature=1.0, generator=torch.Generator().manual_seed(0))
    b = sample(model, features, temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert [c.tokens for c in a] == [c.tokens for c in b]
    cold = sample(model, features, temperature=1e-4, generator=torch.Generator().manual_seed(1))
    assert [c.tokens for c in cold] == [c.tokens for c in greedy(model, features)]
    with pytest.raises(VsekitError, match="temperature"):
        sample(model, features, temperature=0)


def test_decoders_never_emit_specials_or_empty_captions():
    model = tiny_model("rnn", vocab_size=9)
    with torch.no_grad():  # make <unk>, <pad>, <start> and END the most likely words everywhere
        model.output.bias[:4] = 50.0
    features = torch.randn(4, 6)
    for caps in [greedy(model, features, max_len=5), [c[0] for c in beam_search(model, features, 2, 5)]]:
        for c in caps:
            assert c.tokens and all(t >= 4 for t in c.tokens)


@pytest.mark.parametrize("cell", CELLS)
def test_tiny_model_overfits_and_beam_search_reproduces_the_captions(cell):
    vocab = Vocabulary("a dog cat runs sits on the grass mat red ball".split())
    captions = ["a dog runs on the grass", "a cat sits on the mat", "the red ball", "a dog sits"]
    ids = [vocab.encode(c.split()) for c in captions]
    torch.manual_seed(0)
    features = torch.eye(4, 8) * 3
    model = MultimodalRNN(
        MultimodalRNNConfig(8, len(vocab), cell=cell, word_dim=16, hidden_dim=32, dropout=0, image_dropout=0)
    )
    inputs, targets = caption_batch(ids, vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(300):
        loss = model.loss(features, inputs, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    captioner = MRNNCaptioner(model.eval(), vocab, {"backbone": "x", "kind": "one-layer", "image_dim": 8})
    assert captioner.caption(features, decoding="beam", beam_size=3) == captions
    assert captioner.caption(features, decoding="greedy") == captions


def test_captioner_file_round_trip(tmp_path):
    vocab = Vocabulary([f"w{i}" for i in range(10)])
    model = tiny_model("lstm", vocab_size=len(vocab), image_dim=6)
    image = {"backbone": "mobilenet_v2", "kind": "one-layer", "image_dim": 6}
    captioner = MRNNCaptioner(model, vocab, image, meta={"recipe": {"name": "t"}})
    features = torch.randn(5, 6)
    path = save_captioner(captioner, tmp_path / "c.safetensors")
    loaded = load_captioner(path)
    assert loaded.vocab == vocab and loaded.image == image and loaded.meta == {"recipe": {"name": "t"}}
    assert loaded.caption(features) == captioner.caption(features)
    half = load_captioner(save_captioner(captioner, tmp_path / "h.safetensors", half=True))
    assert (tmp_path / "h.safetensors").stat().st_size < path.stat().st_size * 0.6
    assert half.caption(features, decoding="greedy") == captioner.caption(features, decoding="greedy")
    with pytest.raises(VsekitError, match="captioner reads 6-d"):
        loaded.caption(torch.randn(2, 5))


def test_bad_captioner_files_are_named(tmp_path):
    from safetensors.torch import save_file

    with pytest.raises(VsekitError, match="not found"):
        load_captioner(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(VsekitError, match="junk.safetensors"):
        load_captioner(junk)
    joint = tmp_path / "joint.safetensors"
    save_file({"x": torch.zeros(1)}, str(joint), metadata={"format": MODEL_FORMAT})
    with pytest.raises(VsekitError, match="joint-embedding model"):
        load_captioner(joint)


def test_consensus_caption_and_nearest_neighbour():
    assert consensus_caption(["a dog runs", "a dog runs fast", "two cats sleep"]) in {
        "a dog runs",
        "a dog runs fast",
    }
    assert consensus_caption(["only one"]) == "only one"
    feats = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]], dtype=np.float32)
    caps = {"a": ["a red car", "a red car parked"], "b": ["a dog"], "c": ["blue sky", "a blue sky", "sky"]}
    nn = NearestNeighbourCaptioner().fit(feats, ["a", "b", "c"], caps)
    query = np.array([[0.1, 0.9, 0.0], [0.0, 0.2, 5.0], [3.0, 0.0, 0.1]], dtype=np.float32)
    assert nn.neighbours(query) == [1, 2, 0]
    # "blue sky": F1 0.8 with "a blue sky", 0.667 with "sky" (mean 0.733) beats "a blue sky" (0.8, 0.5)
    assert nn.caption(query) == ["a dog", "blue sky", "a red car"]
    with pytest.raises(VsekitError, match="without captions"):
        NearestNeighbourCaptioner().fit(feats, ["a", "b", "z"], caps)


def test_length_bucketed_batches_cover_every_caption_once():
    lengths = [int(x) for x in np.random.default_rng(0).integers(1, 30, size=1000)]
    batches = length_bucketed_batches(lengths, 32, torch.Generator().manual_seed(0), pool=10)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert all(len(b) <= 32 for b in batches)
    spread = np.mean([max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches])
    assert spread < 5  # similar lengths per batch (a random batch spans ~25)


def test_recipes_load_and_bad_recipe_fields_are_named(tmp_path):
    assert load_caption_recipe("mrnn-lstm").cell == "lstm"
    assert load_caption_recipe("mrnn-rnn").cell == "rnn"
    # the shipped captioner's recipe is the previous one on the shipped joint model's backbone, nothing else
    old, new = load_caption_recipe("mrnn-lstm").to_dict(), load_caption_recipe("mrnn-lstm-effnet").to_dict()
    assert {k for k in new if new[k] != old[k]} == {"name", "description", "backbone"}
    assert (old["backbone"], new["backbone"]) == ("mobilenet_v2", "efficientnet_lite0")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"cell": "gru"}))
    with pytest.raises(VsekitError, match="cell"):
        load_caption_recipe(bad)
    bad.write_text(json.dumps({"epochz": 3}))
    with pytest.raises(VsekitError, match="epochz"):
        load_caption_recipe(bad)
    with pytest.raises(VsekitError, match="available"):
        load_caption_recipe("no-such-recipe")


# -- trainer on a tiny corpus with fake features and a fake metric ------------------------------------


def fake_features(corpus, image_ids, backbone="mobilenet_v2", kind="one-layer", fne=None, **kwargs):
    rows = [np.random.default_rng(abs(hash(i)) % 2**32).standard_normal(16) for i in image_ids]
    return np.stack(rows).astype(np.float32), None


def word_overlap_score(predictions, references):
    """A stand-in metric (no Java): mean fraction of predicted words found in the references, x100."""
    values = []
    for image_id, text in predictions.items():
        ref_words = {w for r in references[image_id] for w in r.lower().split()}
        words = text.split()
        values.append(sum(w in ref_words for w in words) / max(len(words), 1))
    return {"bleu4": 0.0, "cider": 100 * float(np.mean(values))}


def test_trainer_writes_a_loadable_captioner_and_resumes(tmp_path):
    corpus = load_corpus(write_tiny_corpus(tmp_path / "corpus"))
    config = tiny_caption_config(patience=10)
    kwargs = {
        "progress": False,
        "feature_fn": fake_features,
        "score_fn": word_overlap_score,
        "log": lambda s: None,
    }
    summary = train_captioner(corpus, config, tmp_path / "run", **kwargs)
    assert summary["epochs_completed"] == 2 and summary["best_epoch"] in (1, 2)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in log] == [1, 2] and log[1]["train_loss"] < log[0]["train_loss"]
    captioner = load_captioner(summary["model_path"])
    assert captioner.image == {"backbone": "mobilenet_v2", "kind": "one-layer", "image_dim": 16}
    assert len(captioner.caption(np.zeros((2, 16), np.float32))) == 2

    with pytest.raises(VsekitError, match="--resume"):
        train_captioner(corpus, config, tmp_path / "run", **kwargs)
    longer = CaptionTrainConfig(**{**config.to_dict(), "epochs": 3})
    resumed = train_captioner(corpus, longer, tmp_path / "run", resume=True, **kwargs)
    assert resumed["epochs_completed"] == 3 and len(resumed["history"]) == 3
    other = CaptionTrainConfig(**{**config.to_dict(), "epochs": 4, "hidden_dim": 32})
    with pytest.raises(ConfigMismatchError, match="hidden_dim"):
        train_captioner(corpus, other, tmp_path / "run", resume=True, **kwargs)


def test_no_progress_reaches_the_feature_extraction(tmp_path):
    """`train-captioner --no-progress` hid the epoch bars but not the CNN's extraction bars."""
    corpus = load_corpus(write_tiny_corpus(tmp_path / "corpus"))
    asked = []

    def features(corpus, image_ids, backbone="mobilenet_v2", kind="one-layer", fne=None, **kwargs):
        asked.append(kwargs.get("progress", True))
        return fake_features(corpus, image_ids, backbone, kind, fne)

    config = CaptionTrainConfig(**{**tiny_caption_config().to_dict(), "epochs": 1})
    kwargs = {"feature_fn": features, "score_fn": word_overlap_score, "log": lambda s: None}
    train_captioner(corpus, config, tmp_path / "quiet", progress=False, **kwargs)
    assert asked and not any(asked)
    asked.clear()
    train_captioner(corpus, config, tmp_path / "bars", progress=True, **kwargs)
    assert asked and all(asked)


def test_eval_every_epochs_reads_the_dev_split_once_and_keeps_the_last_epoch(tmp_path):
    """A fixed-epoch retrain (settings chosen on a validation slice) scores its dev split once, at the end."""
    corpus = load_corpus(write_tiny_corpus(tmp_path / "corpus"))
    scored = []

    def score(predictions, references):
        scored.append(len(predictions))
        return word_overlap_score(predictions, references)

    config = CaptionTrainConfig(**{**tiny_caption_config().to_dict(), "epochs": 3, "eval_every": 3})
    kwargs = {"progress": False, "feature_fn": fake_features, "log": lambda s: None}
    summary = train_captioner(corpus, config, tmp_path / "run", score_fn=score, **kwargs)
    assert len(scored) == 1 and summary["best_epoch"] == 3 and summary["epochs_completed"] == 3
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in log] == [1, 2, 3] and [("dev" in e) for e in log] == [False, False, True]
    with pytest.raises(VsekitError, match="eval_every"):
        CaptionTrainConfig(**{**config.to_dict(), "eval_every": 0}).validate()


def test_factored_image_projection_round_trips(tmp_path):
    """image_rank > 0 factors W_hi (for 18K-d FNE codes); the file records it and reloads exactly."""
    vocab = Vocabulary([f"w{i}" for i in range(6)])
    torch.manual_seed(0)
    config = MultimodalRNNConfig(image_dim=40, vocab_size=len(vocab), word_dim=8, hidden_dim=12, image_rank=5)
    model = MultimodalRNN(config).eval()
    assert [tuple(p.shape) for p in model.image_bias.parameters()] == [(5, 40), (48, 5), (48,)]
    captioner = MRNNCaptioner(
        model, vocab, {"backbone": "mobilenet_v2", "kind": "one-layer", "image_dim": 40}
    )
    features = torch.randn(3, 40)
    loaded = load_captioner(save_captioner(captioner, tmp_path / "f.safetensors"))
    assert loaded.model.config.image_rank == 5
    assert loaded.caption(features, beam_size=2) == captioner.caption(features, beam_size=2)
    with pytest.raises(VsekitError, match="image_rank"):
        MultimodalRNNConfig(image_dim=4, vocab_size=6, image_rank=-1).validate()


# -- reranking the beam with the joint embedding -------------------------------------------------------


def test_rerank_choose_and_tune_on_hand_made_candidates():
    from vsekit.captioning.decode import Caption
    from vsekit.captioning.rerank import choose, tune_rerank

    # image a: the likely caption is wrong, the slightly less likely one matches the image
    cands = [[Caption((4, 5), -1.0), Caption((4, 6, 7), -1.5)], [Caption((5,), -0.5), Caption((6, 7), -3.0)]]
    texts = [["a wrong", "a right one"], ["right", "wrong too"]]
    cosines = [[0.1, 0.4], [0.5, 0.2]]
    assert choose(cands, cosines, weight=0, length_penalty=0) == [0, 0]
    # weight 2: a: -1 + 0.2 = -0.8 vs -1.5 + 0.8 = -0.7 -> 1; b: -0.5 + 1.0 vs -3 + 0.4 -> 0
    assert choose(cands, cosines, weight=2, length_penalty=0) == [1, 0]
    # length penalty 1 alone: a: -1/3 vs -1.5/4 = -0.375 -> 0
    assert choose(cands, cosines, weight=0, length_penalty=1) == [0, 0]

    def right_count(predictions, references):
        hits = sum(p.split()[-1] in {"one", "right"} for p in predictions.values())
        return {"cider": float(hits), "bleu4": 0.0}

    weight, penalty, grid = tune_rerank(
        cands,
        texts,
        cosines,
        ["a", "b"],
        {"a": ["x"], "b": ["y"]},
        right_count,
        weights=(0, 2),
        length_penalties=(0.0,),
    )
    assert (weight, penalty) == (2, 0.0) and len(grid) == 2


def test_embedding_cosines_pair_each_image_with_its_own_candidates():
    from vsekit.captioning.rerank import embedding_cosines

    class FakeJoint:
        def embed_images(self, feats):
            return torch.nn.functional.normalize(torch.as_tensor(feats, dtype=torch.float32), dim=1)

        def embed_texts(self, texts):
            table = {"x": [1.0, 0.0], "y": [0.0, 1.0], "xy": [0.6, 0.8]}
            return torch.tensor([table[t] for t in texts])

    cos = embedding_cosines(FakeJoint(), np.array([[1.0, 0.0], [0.0, 2.0]]), [["x", "xy"], ["x", "y", "xy"]])
    assert cos[0] == pytest.approx([1.0, 0.6]) and cos[1] == pytest.approx([0.0, 1.0, 0.8])


def test_describe_features_in_batches_with_a_bar_changes_no_caption(capsys):
    """Captioning a split shows a per-batch bar, and batching changes no caption: the same as the
    captioner decoding all rows at once."""
    from vsekit.captioning.generator import DECODE_BATCH, CaptionGenerator, DecodeSettings

    gen = CaptionGenerator(decode=DecodeSettings(decoding="greedy"), rerank=False, device="cpu")
    rows = DECODE_BATCH + 44
    feats = np.random.default_rng(0).standard_normal((rows, gen.image["image_dim"])).astype(np.float32)
    whole = gen.captioner.decode(feats, decoding="greedy", batch_size=rows, no_repeat_ngram=3)
    got = gen.describe_features(feats, progress=True)
    assert got == [[gen.captioner.text(c[0])] for c in whole]
    err = capsys.readouterr().err
    assert "captioning" in err and f"{rows}/{rows}" in err
    gen.describe_features(feats[:5], progress=True)  # one batch: no bar for instant work
    assert "captioning" not in capsys.readouterr().err
