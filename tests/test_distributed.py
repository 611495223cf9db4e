"""Data-parallel training: 2 ranks (gloo on loopback, spawned processes) == 1 rank with the same global batch.

One spawn of 2 processes runs every 2-rank scenario (process start-up dominates the cost); each test then
compares its scenario with single-process runs made here. The workers join the group the way torchrun's
processes do: through the environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) that
``train`` reads itself. ``batch_size`` is the global batch: 2 ranks x 9 or 8 pairs == 1 rank x 17 pairs.

Tolerance: the ranks sum the same terms in another order (each rank's partial gradient, then the
all-reduce), so weights agree to float32 rounding, not bit for bit: |a - b| <= 1e-5 + 1e-4 |b| (the
observed gap is <= 1.4e-6 after 3-4 epochs of Adam); the per-epoch losses agree to a relative 1e-5
(observed <= 4e-8). Adam is blind to a gradient scaled by a constant, so one batch's gradient is also
checked directly against the whole-batch gradient (to 1e-6 of its largest entry; observed 7e-8).
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from test_training import TINY, fake_features, tiny_corpus
from vsekit.data import load_corpus
from vsekit.embedding.losses import ContrastiveLoss
from vsekit.embedding.trainer import load_checkpoint, train
from vsekit.errors import VsekitError
from vsekit.training import distributed

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.skipif(not torch.distributed.is_available(), reason="this PyTorch has no torch.distributed"),
]

WORLD = 2
# 24 training images x 5 captions = 120 pairs = 7 x 17 + 1: ranks get 9 + 8 pairs, and in the last batch
# rank 1 gets none (it must still take part in every collective and step)
BASE = dataclasses.replace(TINY, batch_size=17, epochs=3)
SCENARIOS = {
    "sum": BASE,
    "hardest": dataclasses.replace(BASE, loss="max_violation", max_violation_after_epoch=None),
}
# resume across world sizes: FNE features, warm-up then hardest negative, StepLR, early-stopping state
RESUME = dataclasses.replace(
    BASE, epochs=4, image_features="fne", loss="max_violation", max_violation_after_epoch=1, lr_decay_epochs=2
)


def _free_ports(n: int) -> tuple[int, ...]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return tuple(s.getsockname()[1] for s in socks)
    finally:
        for s in socks:
            s.close()


def _train(corpus, config, out: Path, **kw):
    return train(corpus, config, out, progress=False, feature_fn=fake_features(), log=lambda s: None, **kw)


def _gather_checks() -> dict:
    """What gather_for_loss and shard do on this rank (uneven and empty shares, gradient paths)."""
    out = {}
    for n in (5, 1):
        batch = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
        mine = distributed.shard(batch).clone().requires_grad_(True)
        ids = distributed.shard(torch.arange(n) * 10**12)  # int64 rows travel exactly next to the floats
        gathered, all_ids = distributed.gather_for_loss(mine, ids)
        out[f"roundtrip_{n}"] = torch.equal(gathered, batch) and torch.equal(
            all_ids, torch.arange(n) * 10**12
        )
        (gathered * torch.arange(n, dtype=torch.float32)[:, None]).sum().backward()
        out[f"grad_{n}"] = mine.grad[:, 0].tolist()  # row j of this rank is global row j * WORLD + rank
    return out


def _gradient_checks() -> dict:
    """The 2-rank gradient (shard, gather, global loss, backward, sum over ranks) against the gradient of
    the whole batch computed on this process alone. Adam hides a gradient off by a constant factor (mean
    over ranks instead of the sum), so the training comparisons alone would not catch one."""
    out = {}
    for max_violation in (False, True):
        torch.manual_seed(0)
        image_proj, text_proj = torch.nn.Linear(6, 4), torch.nn.Linear(5, 4)
        feats, words = torch.randn(7, 6), torch.randn(7, 5)
        ids = torch.tensor([0, 1, 1, 2, 3, 3, 4])  # two images with two captions each in the batch
        loss_fn = ContrastiveLoss(0.2, max_violation)
        params = [*image_proj.parameters(), *text_proj.parameters()]

        def embed(f, w, proj_i=image_proj, proj_t=text_proj):
            return F.normalize(proj_i(f), dim=1), F.normalize(proj_t(w), dim=1)

        loss_fn(*embed(feats, words), ids).backward()  # the reference: one process, the whole batch
        reference = [p.grad.clone() for p in params]
        for p in params:
            p.grad = None
        img, cap, all_ids = distributed.gather_for_loss(
            *embed(distributed.shard(feats), distributed.shard(words)), distributed.shard(ids)
        )
        loss_fn(img, cap, all_ids).backward()
        distributed.sync_gradients(params)
        key = "hardest" if max_violation else "sum"
        out[key] = max(float((p.grad - r).abs().max()) for p, r in zip(params, reference, strict=True))
        out[key + "_scale"] = max(float(r.abs().max()) for r in reference)
    return out


def _worker(rank: int, ports: tuple[int, int], root: str) -> None:
    faulthandler.dump_traceback_later(120, exit=True)  # a hung collective fails the test, not the suite
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(ports[0]))
    torch.set_num_threads(1)
    base = Path(root)
    corpus = load_corpus(base / "corpus" / "captions.csv")  # the fixture wrote it
    _train(corpus, SCENARIOS["sum"], base / "sum-2")  # train() joins and leaves the group, as under torchrun
    assert not torch.distributed.is_initialized()
    # the other runs share one group (train() uses a group its caller made); a fresh port, as the
    # first group's store may still hold the old one
    os.environ["MASTER_PORT"] = str(ports[1])
    torch.distributed.init_process_group("gloo")
    try:
        _train(corpus, SCENARIOS["hardest"], base / "hardest-2")
        _train(corpus, dataclasses.replace(RESUME, epochs=2), base / "resume-2-then-1")
        _train(corpus, RESUME, base / "resume-1-then-2", resume=True)
        checks = {**_gather_checks(), **_gradient_checks()}
        (base / f"gather-{rank}.json").write_text(json.dumps(checks))
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Every 2-rank run (one spawn), plus the single-process halves they resume from or into."""
    root = tmp_path_factory.mktemp("ddp")
    corpus = tiny_corpus(root / "corpus")
    _train(corpus, dataclasses.replace(RESUME, epochs=2), root / "resume-1-then-2")
    mp.spawn(_worker, args=(_free_ports(2), str(root)), nprocs=WORLD, join=True)
    _train(corpus, RESUME, root / "resume-2-then-1", resume=True)
    return root


def _log(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def _assert_equivalent(two: Path, one: Path) -> None:
    la, lb = _log(two), _log(one)
    assert [e["epoch"] for e in la] == [e["epoch"] for e in lb]
    assert [e["loss"] for e in la] == pytest.approx([e["loss"] for e in lb], rel=1e-5)
    assert [e["dev"]["rsum"] for e in la] == pytest.approx([e["dev"]["rsum"] for e in lb], abs=1e-6)
    ca, cb = load_checkpoint(two / "checkpoint.pt"), load_checkpoint(one / "checkpoint.pt")
    assert ca["epoch"] == cb["epoch"] and ca["model"].keys() == cb["model"].keys()
    for key in ca["model"]:
        torch.testing.assert_close(ca["model"][key], cb["model"][key], atol=1e-5, rtol=1e-4, msg=key)
    assert torch.equal(ca["batch_generator"], cb["batch_generator"])  # the same epoch orders were drawn


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_two_ranks_equal_one_rank_with_the_same_global_batch(runs, tmp_path, name):
    corpus = tiny_corpus(tmp_path / "corpus")
    _train(corpus, SCENARIOS[name], tmp_path / "one")
    _assert_equivalent(runs / f"{name}-2", tmp_path / "one")
    # the loss really is global: the hardest negative of a pair may sit on the other rank
    assert _log(runs / f"{name}-2")[0]["loss_kind"] == ("sum" if name == "sum" else "max_violation")


@pytest.mark.parametrize("order", ["resume-2-then-1", "resume-1-then-2"])
def test_resume_with_another_world_size(runs, tmp_path, order):
    corpus = tiny_corpus(tmp_path / "corpus")
    _train(corpus, RESUME, tmp_path / "straight")
    _assert_equivalent(runs / order, tmp_path / "straight")


def test_gather_inverts_shard_and_keeps_only_local_gradients(runs):
    for rank in range(WORLD):
        checks = json.loads((runs / f"gather-{rank}.json").read_text())
        assert checks["roundtrip_5"] and checks["roundtrip_1"]
        # 5 rows: rank 0 holds global rows 0, 2, 4 and rank 1 rows 1, 3; d(sum_j j * row_j)/d row_j = j
        assert checks["grad_5"] == ([0.0, 2.0, 4.0] if rank == 0 else [1.0, 3.0])
        assert checks["grad_1"] == ([0.0] if rank == 0 else [])  # rank 1's share of a 1-row batch is empty


def test_summed_rank_gradients_are_the_whole_batch_gradient(runs):
    for rank in range(WORLD):
        checks = json.loads((runs / f"gather-{rank}.json").read_text())
        for loss in ("sum", "hardest"):
            assert checks[loss + "_scale"] > 0.1  # a real gradient, so a factor of 2 would show
            assert checks[loss] <= 1e-6 * checks[loss + "_scale"], (rank, loss, checks[loss])


def test_world_size_one_is_the_identity():
    x = torch.randn(3, 2, requires_grad=True)
    assert distributed.shard(x) is x and distributed.gather_for_loss(x, x)[1] is x
    assert distributed.broadcast_from_main(lambda a: a + 1, 1) == 2


def test_a_trainer_that_cannot_run_data_parallel_says_so(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(VsekitError, match="trains on one process only .*run it without torchrun"):
        distributed.refuse_data_parallel("the thing", "because")
