"""The soft-attention captioner (Xu et al. 2015; vsekit.captioning.attention): the attention step by hand,
its weights, the decoders through its step interface, the captioner file, the recipe, and exact resume of a
killed training run."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from corpus_helpers import write_tiny_corpus  # noqa: E402 - tests/ is on sys.path under pytest
from kill_helpers import calls_during, overlap_score, run_self_signalled, seeded_step
from train_helpers import assert_readable_after_kill, assert_same_run, tiny_caption_config
from vsekit.captioning.attention import SoftAttentionCaptioner, SoftAttentionConfig
from vsekit.captioning.captioner import MRNNCaptioner, load_captioner, save_captioner
from vsekit.captioning.decode import beam_search, greedy
from vsekit.captioning.mrnn import caption_batch
from vsekit.captioning.trainer import CaptionTrainConfig, load_caption_recipe, train_captioner
from vsekit.data import load_corpus
from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[1]
GRID_CELLS = 49  # the 7 x 7 map of a 224 crop, what the trainer expects of "grid" rows
CELL_DIM = 4  # the fake features' cell width


def tiny_model(vocab_size: int = 9, cells: int = 3, cell_dim: int = 5, seed: int = 0, **kw):
    torch.manual_seed(seed)
    config = SoftAttentionConfig(
        cells=cells, cell_dim=cell_dim, vocab_size=vocab_size, word_dim=8, hidden_dim=12,
        annotation_dim=6, attention_dim=7, **kw,
    )  # fmt: skip
    model = SoftAttentionCaptioner(config).eval()
    with torch.no_grad():  # a peakier random model than the init, so decoders disagree when they should
        model.output.weight.mul_(20)
    return model


def teacher_forced_log_prob(model, features: torch.Tensor, captions: list[list[int]]) -> torch.Tensor:
    vocab = Vocabulary([f"w{i}" for i in range(model.config.vocab_size - 4)])
    inputs, targets = caption_batch(captions, vocab)
    with torch.no_grad():
        logp = torch.log_softmax(model(features, inputs).double(), dim=-1)
    picked = logp.gather(2, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return (picked * (targets != -100)).sum(dim=1)


def test_a_two_cell_attention_step_by_hand():
    """Eq. 4-6 on two annotations with hand-set weights: e_i = w^T tanh(W_a a_i + W_h h), alpha =
    softmax(e), z = beta * sum_i alpha_i a_i with beta = sigmoid(f_beta(h))."""
    config = SoftAttentionConfig(
        cells=2, cell_dim=2, vocab_size=5, word_dim=2, hidden_dim=2, annotation_dim=2, attention_dim=2
    )
    model = SoftAttentionCaptioner(config).eval()
    with torch.no_grad():
        model.att_key.weight.copy_(torch.eye(2))  # W_a = I, b_a = 0
        model.att_key.bias.zero_()
        model.att_query.weight.copy_(torch.tensor([[0.0, 0.0], [2.0, 0.0]]))  # W_h
        model.att_score.weight.copy_(torch.tensor([[1.0, -1.0]]))  # w_e
        model.att_score.bias.fill_(0.3)  # a shift of every e_i: alpha does not change
        model.gate.weight.copy_(torch.tensor([[1.0, 1.0]]))  # f_beta
        model.gate.bias.fill_(-0.25)
    a = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # two cells
    h = torch.tensor([[0.5, 0.0]])  # W_h h = (0, 1)
    z, alpha = model.attend(h, a, model.att_key(a))
    # cell 1: tanh((1, 0) + (0, 1)) = (tanh 1, tanh 1), so e_1 = 0 (+ 0.3);
    # cell 2: tanh((0, 1) + (0, 1)) = (0, tanh 2), so e_2 = -tanh 2 (+ 0.3)
    e1, e2 = 0.0, -math.tanh(2.0)
    alpha1 = math.exp(e1) / (math.exp(e1) + math.exp(e2))
    beta = 1 / (1 + math.exp(-(0.5 - 0.25)))
    assert alpha[0].tolist() == pytest.approx([alpha1, 1 - alpha1], abs=1e-6)
    assert z[0].tolist() == pytest.approx([beta * alpha1, beta * (1 - alpha1)], abs=1e-6)
    ungated = SoftAttentionCaptioner(SoftAttentionConfig(**{**config.to_dict(), "gate": False}))
    ungated.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("gate.")})
    z, _ = ungated.attend(h, a, ungated.att_key(a))
    assert z[0].tolist() == pytest.approx([alpha1, 1 - alpha1], abs=1e-6)


def test_attention_weights_sum_to_one_and_the_penalty_is_eq_14():
    model = tiny_model(vocab_size=11, cells=5)
    features = torch.randn(3, 5 * 5)
    vocab = Vocabulary([f"w{i}" for i in range(7)])
    inputs, targets = caption_batch([[4, 5, 6], [7, 8], [9, 4, 5, 6, 7]], vocab)
    with torch.no_grad():
        _, alpha = model.run(features, inputs)
    assert alpha.shape == (3, inputs.shape[1], 5)
    assert bool((alpha >= 0).all())
    assert alpha.sum(dim=-1).detach().numpy() == pytest.approx(np.ones((3, inputs.shape[1])), abs=1e-6)
    # lambda * sum_i (1 - sum_t alpha_ti)^2 over each caption's real steps, per target word
    with torch.no_grad():
        loss, nll = model.loss_terms(features, inputs, targets)
    real = (targets != -100).float()
    attended = (alpha * real.unsqueeze(-1)).sum(dim=1)
    penalty = float(((1 - attended) ** 2).sum() / real.sum())
    assert float(loss - nll) == pytest.approx(model.config.attention_reg * penalty, rel=1e-5)
    off = SoftAttentionCaptioner(SoftAttentionConfig(**{**model.config.to_dict(), "attention_reg": 0.0}))
    off.load_state_dict(model.state_dict())
    with torch.no_grad():
        loss, nll = off.eval().loss_terms(features, inputs, targets)
    assert float(loss) == float(nll)


def test_tiny_model_overfits_four_captions_and_beam_and_greedy_reproduce_them():
    vocab = Vocabulary("a dog cat runs sits on the grass mat red ball".split())
    captions = ["a dog runs on the grass", "a cat sits on the mat", "the red ball", "a dog sits"]
    ids = [vocab.encode(c.split()) for c in captions]
    torch.manual_seed(0)
    features = torch.rand(4, 3 * 8) * 3  # four photos of three 8-d cells
    config = SoftAttentionConfig(
        cells=3, cell_dim=8, vocab_size=len(vocab), word_dim=16, hidden_dim=32, annotation_dim=16,
        attention_dim=16, dropout=0, image_dropout=0,
    )  # fmt: skip
    model = SoftAttentionCaptioner(config)
    inputs, targets = caption_batch(ids, vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(300):
        loss, nll = model.loss_terms(features, inputs, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert nll.item() < 0.05
    image = {"backbone": "x", "kind": "grid", "image_dim": 24}
    captioner = MRNNCaptioner(model.eval(), vocab, image)
    assert captioner.caption(features, decoding="beam", beam_size=3) == captions
    assert captioner.caption(features, decoding="greedy") == captions


@pytest.mark.parametrize("no_repeat", [0, 2])
def test_beam_of_one_is_greedy(no_repeat):
    model = tiny_model(vocab_size=14)
    features = torch.randn(7, 15) * 3
    g = greedy(model, features, max_len=8, no_repeat_ngram=no_repeat)
    b = beam_search(model, features, beam_size=1, max_len=8, no_repeat_ngram=no_repeat)
    assert [c.tokens for c in g] == [caps[0].tokens for caps in b]
    assert [c.log_prob for c in g] == pytest.approx([caps[0].log_prob for caps in b], abs=1e-9)


def test_wide_beam_finds_the_exact_best_caption():
    """Brute force: with a beam as wide as the search space, beam search returns the true argmax (the
    photo's annotations travel with the reordered state)."""
    model = tiny_model(vocab_size=7, seed=3)  # 3 real words (ids 4..6)
    features = torch.randn(3, 15) * 2
    all_captions = [list(c) for n in range(1, 4) for c in itertools.product([4, 5, 6], repeat=n)]
    found = beam_search(model, features, beam_size=27, max_len=3, n_best=3)
    for i, caps in enumerate(found):
        scores = teacher_forced_log_prob(
            model, features[i : i + 1].expand(len(all_captions), -1), all_captions
        )
        order = scores.argsort(descending=True)[:3].tolist()
        assert [c.tokens for c in caps] == [tuple(all_captions[j]) for j in order]
        assert [c.log_prob for c in caps] == pytest.approx([scores[j].item() for j in order], abs=1e-6)


def test_captioner_file_round_trip_gives_identical_log_probs(tmp_path):
    vocab = Vocabulary([f"w{i}" for i in range(10)])
    model = tiny_model(vocab_size=len(vocab), cells=3, cell_dim=5)
    image = {"backbone": "efficientnet_lite0", "kind": "grid", "image_dim": 15}
    captioner = MRNNCaptioner(model, vocab, image, meta={"recipe": {"name": "t"}})
    path = save_captioner(captioner, tmp_path / "c.safetensors")
    loaded = load_captioner(path)
    assert isinstance(loaded.model, SoftAttentionCaptioner) and loaded.model.config == model.config
    assert loaded.vocab == vocab and loaded.image == image and loaded.meta == {"recipe": {"name": "t"}}
    features = torch.randn(5, 15)
    words = torch.tensor([4, 5, 6, 7, 8])
    with torch.no_grad():
        (la, sa), (lb, sb) = model.start(features), loaded.model.start(features)
        assert torch.equal(la, lb)
        assert torch.equal(model.step(words, sa)[0], loaded.model.step(words, sb)[0])
    assert loaded.caption(features, beam_size=3) == captioner.caption(features, beam_size=3)
    with pytest.raises(VsekitError, match="captioner reads 15-d"):
        loaded.caption(torch.randn(2, 12))


def test_recipe_fields_of_the_attention_decoder(tmp_path):
    recipe = load_caption_recipe(ROOT / "bench" / "recipes" / "attn-lstm-effnet-val1000.json")
    assert recipe.decoder == "attention" and recipe.image_features == "grid"
    assert recipe.dev_split == "val1000" and recipe.train_split == "train-minus-val1000"
    bad = {
        "decoder": ("transformer", "decoder"),
        "image_features": ("one-layer", "image_features"),
        "attention_reg": (-1.0, "attention_reg"),
        "objective": ("scst", "objective|init_from"),
    }
    for field, (value, match) in bad.items():
        with pytest.raises(VsekitError, match=match):
            CaptionTrainConfig(**{**recipe.to_dict(), field: value}).validate()
    with pytest.raises(VsekitError, match="grid: decoder 'attention'"):  # the m-RNN reads one vector
        CaptionTrainConfig(image_features="grid").validate()


# -- training -------------------------------------------------------------------------------------------


def fake_grid_features(corpus, image_ids, backbone="efficientnet_lite0", kind="grid", fne=None, **kwargs):
    """Stand-in for ``vision.features.image_features`` with ``grid`` rows (49 cells of 4): a fixed random
    row per image id, no CNN run."""
    assert kind == "grid"
    seeds = [int(hashlib.sha256(i.encode()).hexdigest()[:8], 16) for i in image_ids]
    rows = [np.random.default_rng(s).random(GRID_CELLS * CELL_DIM).astype(np.float16) for s in seeds]
    return np.stack(rows), None


def attention_config(**overrides):
    fields = {
        "decoder": "attention", "image_features": "grid", "backbone": "efficientnet_lite0",
        "annotation_dim": 8, "attention_dim": 8, "patience": 10,
    }  # fmt: skip
    return tiny_caption_config(**{**fields, **overrides})


def test_trainer_writes_a_loadable_attention_captioner(tmp_path):
    corpus = load_corpus(write_tiny_corpus(tmp_path / "corpus"))
    kwargs = {"progress": False, "feature_fn": fake_grid_features, "score_fn": overlap_score}
    summary = train_captioner(corpus, attention_config(), tmp_path / "run", log=lambda s: None, **kwargs)
    assert summary["epochs_completed"] == 2 and summary["best_epoch"] in (1, 2)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert log[1]["train_loss"] < log[0]["train_loss"]
    captioner = load_captioner(summary["model_path"])
    assert isinstance(captioner.model, SoftAttentionCaptioner)
    assert captioner.image == {"backbone": "efficientnet_lite0", "kind": "grid", "image_dim": 196}
    assert captioner.meta["recipe"]["decoder"] == "attention"
    assert len(captioner.caption(np.zeros((2, 196), np.float32))) == 2


# A training of the attention captioner in a fresh Python, resumable, on fake grid features: argv = corpus
# folder, run folder, the recipe as JSON. It prints "ready" before it trains.
ATTENTION_JOB = """
import json, sys, torch
torch.set_num_threads(1)
from kill_helpers import overlap_score
from test_attention_captioner import fake_grid_features
from vsekit.captioning.trainer import CaptionTrainConfig, train_captioner
from vsekit.data import load_corpus
corpus = load_corpus(sys.argv[1])
config = CaptionTrainConfig.from_dict(json.loads(sys.argv[3]))
print("ready", flush=True)
train_captioner(corpus, config, sys.argv[2], resume=True, progress=False, device="cpu",
                feature_fn=fake_grid_features, score_fn=overlap_score, log=print)
"""


def test_attention_training_killed_at_a_random_moment_resumes_to_the_uninterrupted_model(tmp_path):
    """As test_kill's captioner test: SIGKILL at a seeded training step after the first epoch's
    checkpoint, then the same command again, ends with the files of the uninterrupted run."""
    import signal

    data = write_tiny_corpus(tmp_path / "corpus", 16, 6, 6)
    corpus = load_corpus(data)
    config = attention_config(epochs=4)

    def run(out: Path):
        train_captioner(
            corpus, config, out, resume=True, progress=False, device="cpu",
            feature_fn=fake_grid_features, score_fn=overlap_score, log=lambda s: None,
        )  # fmt: skip

    steps = calls_during(lambda: run(tmp_path / "full"))
    args = [str(data), str(tmp_path / "killed"), json.dumps(config.to_dict())]
    step = seeded_step(35, steps // config.epochs + 1, steps)
    status, stderr = run_self_signalled(ATTENTION_JOB, args, step)
    assert status == -signal.SIGKILL, f"the job was not killed at step {step} of {steps}: {stderr[-500:]}"
    assert (tmp_path / "killed" / "checkpoint.pt").exists()
    assert_readable_after_kill(tmp_path / "killed", "captioner")
    run(tmp_path / "killed")
    assert_same_run(tmp_path / "full", tmp_path / "killed", "captioner.safetensors", "captioner")
