"""The joint model's text side as a cached ONNX graph (vsekit.retrieval.text_engine): the same vectors as
PyTorch, never run when damaged or when its check failed, and a cold search that imports no torch."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vsekit
from vsekit.embedding.pipeline import VSEModel
from vsekit.fileio import file_sha256
from vsekit.resources import pretrained_path
from vsekit.retrieval.concepts import SentenceVectors
from vsekit.retrieval.text_engine import TOLERANCE, TextTower, prepare_tower, tower_path
from vsekit.text.pretrained import MiniLMEncoder

TEXTS = [
    "a dog runs on the beach",
    "Two CHILDREN play in the snow!!",
    "a dog runs on the beach",  # asked twice in one call
    " ".join(["a man in a red jacket climbs a rock wall"] * 50),  # past the 256 word pieces: cut
]


@pytest.fixture(scope="module")
def shipped() -> tuple[VSEModel, str]:
    return VSEModel.load("vse"), file_sha256(pretrained_path("vse"))


@pytest.fixture(scope="module")
def tower_cache(tmp_path_factory, shipped) -> str:
    root = str(tmp_path_factory.mktemp("cache"))
    assert prepare_tower(*shipped, cache_root=root) is not None
    return root


def test_the_graph_gives_the_models_vectors(shipped, tower_cache):
    model, sha = shipped
    tower = TextTower.open(sha, tower_cache)
    assert tower is not None
    np.testing.assert_allclose(tower.embed_texts(TEXTS), model.embed_texts(TEXTS), atol=1e-5)
    # the pretrained MiniLM's sentence vectors (the shipped vse tunes its top layer for the joint side only)
    sentences = MiniLMEncoder(output_dim=1, head="linear").prepare(TEXTS)["sentence"].numpy()
    np.testing.assert_allclose(tower.sentences(TEXTS), sentences, atol=1e-5)
    # the concept route's sentence vectors: the same from either engine
    np.testing.assert_allclose(
        SentenceVectors(tower)(TEXTS), SentenceVectors(model.network.text_encoder)(TEXTS), atol=1e-5
    )
    assert tower.record["check"]["joint_max_abs_diff"] <= TOLERANCE


def _copied_cache(tower_cache: str, sha: str, root: Path) -> tuple[Path, Path]:
    """A cache under ``root`` holding a copy of the shipped model's graph and its record: ``(the graph
    exported in the module's cache, its copy)``."""
    (root / "onnx").mkdir(parents=True)
    path = tower_path(sha, tower_cache)
    for name in (path.name, path.with_suffix(".json").name):
        (root / "onnx" / name).write_bytes((path.parent / name).read_bytes())
    return path, root / "onnx" / path.name


def test_a_damaged_graph_is_never_run_and_is_exported_again(shipped, tower_cache, tmp_path):
    model, sha = shipped
    root = tmp_path / "cache"
    path, damaged = _copied_cache(tower_cache, sha, root)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x10  # one bit in the middle of the weights
    damaged.write_bytes(bytes(data))
    assert TextTower.open(sha, root) is None
    again = prepare_tower(model, sha, cache_root=root)
    assert again is not None
    assert damaged.read_bytes() == path.read_bytes()


def test_a_graph_that_failed_its_check_is_not_used_nor_exported_again(shipped, tower_cache, tmp_path):
    model, sha = shipped
    root = tmp_path / "cache"
    path, graph = _copied_cache(tower_cache, sha, root)
    record = json.loads(path.with_suffix(".json").read_text())
    record["check"]["joint_max_abs_diff"] = 0.5  # as if the export computed something else
    graph.with_suffix(".json").write_text(json.dumps(record))
    before = graph.stat().st_mtime_ns
    assert TextTower.open(sha, root) is None
    assert prepare_tower(model, sha, cache_root=root) is None
    assert graph.stat().st_mtime_ns == before


def test_a_graph_is_hashed_once_per_version_of_its_file_and_a_changed_one_is_refused(
    shipped, tower_cache, tmp_path, monkeypatch
):
    """A cold search hashed the 105 MB graph every time; now once per version of the file (its stat
    recorded beside it): loaded unhashed from the file while the stat is the same, hashed again when it
    is not, even after a write that kept the size and put the modification time back."""
    from vsekit.retrieval import file_versions, text_engine

    _, sha = shipped
    root = tmp_path / "cache"
    path, graph = _copied_cache(tower_cache, sha, root)
    monkeypatch.setattr(file_versions, "SETTLE_NS", -(10**12))  # as if written long ago
    loaded = []  # how each load read the graph: from hashed bytes, or from the file unhashed
    real = text_engine._session
    monkeypatch.setattr(
        text_engine, "_session", lambda source, p: loaded.append(type(source).__name__) or real(source, p)
    )
    assert TextTower.open(sha, root) is not None and TextTower.open(sha, root) is not None
    assert loaded == ["bytes", "str"] and graph.with_suffix(".verified.json").is_file()
    times = graph.stat().st_atime_ns, graph.stat().st_mtime_ns
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0x10
    with open(graph, "r+b") as f:  # in place: the same inode and size
        f.write(bytes(data))
    os.utime(graph, ns=times)  # and the modification time put back (the change time moves)
    assert TextTower.open(sha, root) is None and loaded == ["bytes", "str"]
    graph.write_bytes(path.read_bytes())
    assert TextTower.open(sha, root) is not None and loaded[2:] == ["bytes"]


_COLD_SEARCH = """
import runpy, sys
sys.argv = ["vsekit", "search", sys.argv[1], "a dog runs on the grass", "--paths"]
try:
    runpy.run_module("vsekit", run_name="__main__")
except SystemExit as exc:
    assert not exc.code, exc.code
print("torch imported:", "torch" in sys.modules, file=sys.stderr)
"""


def test_a_cold_search_imports_no_torch_and_answers_as_pytorch(photo_index, tmp_path, monkeypatch):
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    index = photo_index("cold", 8)
    assert index.prepare_text_graph()
    expected = [str(index.photos_dir / h.path) for h in index.search("a dog runs on the grass", k=10)]
    env = os.environ | {"VSEKIT_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", _COLD_SEARCH, str(index.path)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "torch imported: False" in done.stderr
    assert done.stdout.split() == expected


def test_a_warm_index_answers_sentences_through_the_graph_once_it_is_there(
    photo_index, tmp_path, monkeypatch
):
    """With its model loaded (a server, a photo query), an index still embeds sentences with the cached
    graph, a third of PyTorch's time; without one it uses the model and tries no export per query."""
    from vsekit.retrieval import index as index_module

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    index = photo_index("warm", 8)
    _ = index.model  # loaded first, as the server's warm-up and a photo query do
    exports: list[str] = []
    failing = lambda model, sha, cache_root=None: exports.append(sha)  # noqa: E731 - an export that fails
    monkeypatch.setattr(index_module, "prepare_tower", failing)
    assert index.text_side() is index.model  # no graph on this machine
    assert index.text_side() is index.model and exports == []  # and no export tried per query
    monkeypatch.undo()
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    assert index.prepare_text_graph()  # the server's warm-up makes it
    side = index.text_side()
    assert isinstance(side, TextTower)
    np.testing.assert_allclose(
        index.embed_texts(["a dog runs on the grass"]),
        index.model.embed_texts(["a dog runs on the grass"]),
        atol=1e-5,
    )


def test_explain_default_beta_is_the_aligners():
    from vsekit.alignment.align import DEFAULT_BETA

    for method in (vsekit.Index.explain, vsekit.Index.explain_picture):
        assert inspect.signature(method).parameters["beta"].default == DEFAULT_BETA


def test_a_text_side_with_tuned_top_layers_exports_both_vectors(tmp_path):
    """A joint model whose MiniLM top layer was trained (``finetune_last``; here an ensemble of two whose
    layers moved apart) exports too: ``joint`` runs each member's tuned layer over the shared frozen
    bottom, ``sentence`` the pretrained layer, as the concept route reads it (not the tuned one)."""
    import torch

    from vsekit.embedding.model import EnsembleEmbedding, JointEmbedding
    from vsekit.embedding.text_tower import export_text_tower, exportable
    from vsekit.retrieval.text_engine import _Graph, _Tokenizer
    from vsekit.text.pretrained import MiniLMEncoder, mean_pool, run_layers

    torch.manual_seed(0)
    members = []
    for _ in range(2):
        text = MiniLMEncoder(output_dim=16, head="residual", hidden_dim=32, finetune_last=1)
        with torch.no_grad():  # as if trained: each member's top layer away from the pretrained one
            for p in text.layers.parameters():
                p.add_(0.05 * torch.randn_like(p))
        members.append(JointEmbedding(text, 12, "efficientnet_lite0", "one-layer", None))
    members[1].text_encoder.share_frozen(members[0].text_encoder)
    network = EnsembleEmbedding(members).eval()
    assert exportable(network)
    path = tmp_path / "tuned.onnx"
    data, check = export_text_tower(network, path, _Tokenizer(), lambda d: _Graph(d, path))
    assert check["joint_max_abs_diff"] <= TOLERANCE and check["sentence_max_abs_diff"] <= TOLERANCE
    sentence, joint = _Graph(data, path)(*_Tokenizer()(TEXTS))
    frozen = MiniLMEncoder(output_dim=1, head="linear")
    np.testing.assert_allclose(sentence, frozen.prepare(TEXTS)["sentence"].numpy(), atol=1e-5)
    encoder = network.text_encoder
    prepared = encoder.prepare(TEXTS)
    with torch.no_grad():
        expected = network.encode_texts(**prepared).numpy()
        tuned = mean_pool(run_layers(encoder.layers, prepared["states"], prepared["mask"]), prepared["mask"])
    np.testing.assert_allclose(joint, expected, atol=1e-5)
    assert np.abs(tuned.numpy() - sentence).max() > 1e-2  # the tuned layer's sentence is another one
    assert check["sentence_identity"] == frozen.identity()
