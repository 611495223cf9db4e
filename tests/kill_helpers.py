"""Kill a job at a seeded random moment (SIGKILL or SIGINT) in a fresh Python; shared by tests/test_kill.py
and the longer campaign in bench/kill_campaign.py.

A job script prints ``ready`` once it has imported and loaded what it needs, then does the work; the
moment is measured from that line, as a fraction of how long the same work took uninterrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def job_env() -> dict[str, str]:
    """The child's environment: this checkout's ``src`` and ``tests`` first, one thread per library."""
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_and_signal(
    script: str,
    args: list[str],
    after: float | Callable[[], bool],
    sig: int = signal.SIGKILL,
    log: Path | None = None,
) -> tuple[bool, int, str]:
    """Run ``script`` with ``args``; send ``sig`` ``after`` seconds after it prints ``ready`` (or, when
    ``after`` is a function, as soon as it returns True).

    Returns ``(was still running when signalled, exit status, stderr)``.
    """
    err = open(log, "w+") if log is not None else subprocess.PIPE  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=err, text=True, env=job_env()
    )
    try:
        line = proc.stdout.readline().strip()
        if line != "ready":
            proc.kill()
            _, stderr = proc.communicate(timeout=60)
            raise RuntimeError(f"job did not start: {line!r} {stderr or ''}")
        if callable(after):
            while proc.poll() is None and not after():
                time.sleep(0.02)
        else:
            time.sleep(after)
        alive = proc.poll() is None
        if alive:
            proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    if log is not None:
        err.seek(0)
        stderr = err.read()
        err.close()
    return alive, proc.returncode, stderr or ""


# Deterministic moments (issue 15 item 7): the job signals itself at the ``step``-th call of a function
# that runs once per unit of work, a moment that depends on no clock, so the kill lands mid-work on a
# machine of any speed. ``where`` = (module, attribute path) of that function.
STEP = ("torch", "Tensor.backward")  # a training step
BATCH = ("vsekit.vision.extract", "_load_batch")  # a batch of photos read for the CNN

# A captioner training (cross-entropy or SCST, as its recipe says) in a fresh Python, resumable, on fake
# features: argv = corpus folder, run folder, the recipe as JSON. It prints "ready" before it trains.
CAPTIONER_JOB = """
import json, sys, torch
torch.set_num_threads(1)
from corpus_helpers import fake_image_features
from kill_helpers import overlap_score
from vsekit.captioning.trainer import CaptionTrainConfig, train_captioner
from vsekit.data import load_corpus
corpus = load_corpus(sys.argv[1])
config = CaptionTrainConfig.from_dict(json.loads(sys.argv[3]))
print("ready", flush=True)
train_captioner(corpus, config, sys.argv[2], resume=True, progress=False, device="cpu",
                feature_fn=fake_image_features, score_fn=overlap_score, log=print)
"""


SELF_SIGNAL = """
import importlib, os, signal
# Ctrl-C raises KeyboardInterrupt even when this test runs as a background job (which starts with SIGINT
# ignored, and Python then installs no handler): as in a terminal
signal.signal(signal.SIGINT, signal.default_int_handler)
_owner = importlib.import_module({module!r})
for _name in {owners!r}:
    _owner = getattr(_owner, _name)
_calls, _real = [0], getattr(_owner, {attr!r})
def _counted(*args, **kwargs):
    _calls[0] += 1
    if _calls[0] == {step}:
        os.kill(os.getpid(), {sig})
    return _real(*args, **kwargs)
setattr(_owner, {attr!r}, _counted)
"""


def _owner_and_attr(where: tuple[str, str]) -> tuple[object, str]:
    import importlib

    module, path = where
    *owners, attr = path.split(".")
    owner = importlib.import_module(module)
    for name in owners:
        owner = getattr(owner, name)
    return owner, attr


def calls_during(fn: Callable[[], object], where: tuple[str, str] = STEP) -> int:
    """How many times ``fn()`` calls the function at ``where`` (training steps, photo batches)."""
    owner, attr = _owner_and_attr(where)
    count, real = [0], getattr(owner, attr)

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    setattr(owner, attr, counted)
    try:
        fn()
    finally:
        setattr(owner, attr, real)
    return count[0]


def seeded_step(seed: int, first: int, last: int) -> int:
    """A step drawn uniformly (``random.Random(seed)``) from ``first`` to ``last``, both included."""
    import random

    return random.Random(seed).randint(first, last)


def run_self_signalled(
    script: str, args: list[str], step: int, sig: int = signal.SIGKILL, where: tuple[str, str] = STEP
) -> tuple[int, str]:
    """Run ``script`` with ``args``, the job signalling itself ``sig`` at the ``step``-th call of the
    function at ``where`` (see :data:`SELF_SIGNAL`); returns ``(exit status, stderr)``: ``-sig`` for a
    SIGKILL that landed."""
    module, path = where
    *owners, attr = path.split(".")
    hook = SELF_SIGNAL.format(module=module, owners=owners, attr=attr, step=int(step), sig=int(sig))
    proc = subprocess.run(
        [sys.executable, "-c", hook + script, *args],
        capture_output=True, text=True, env=job_env(), timeout=600,
    )  # fmt: skip
    return proc.returncode, proc.stderr


def tmp_files(folder: Path) -> list[Path]:
    """Temp files a killed atomic write left behind (harmless: never read, replaced by the next write)."""
    return [p for p in folder.rglob(".*.tmp")]


def overlap_score(predictions: dict, references: dict) -> dict[str, float]:
    """A stand-in caption metric (no Java): mean fraction of predicted words found in the references."""
    values = []
    for image_id, text in sorted(predictions.items()):
        ref_words = {w for r in references[image_id] for w in r.lower().split()}
        words = text.split()
        values.append(sum(w in ref_words for w in words) / max(len(words), 1))
    return {"bleu4": 0.0, "cider": 100 * sum(values) / max(len(values), 1)}


def scnlm_run(out: Path) -> dict:
    """test_scnlm's tiny SC-NLM run (resuming whatever ``out`` holds), with a fake joint model that is a
    pure function of its input: test_scnlm's draws word vectors in order of first use, so a run that
    finds the caption embeddings cached (as a resumed run does) would see other word vectors."""
    import hashlib

    import torch

    import test_scnlm
    from vsekit.captioning.scnlm_trainer import train_scnlm_run

    class PureJoint(test_scnlm.FakeJoint):
        def _word(self, w: str) -> torch.Tensor:
            if w not in self._words:
                seed = int(hashlib.sha256(w.encode()).hexdigest()[:8], 16)
                self._words[w] = torch.randn(self.embed_dim, generator=torch.Generator().manual_seed(seed))
            return self._words[w]

    with torch.random.fork_rng():
        torch.manual_seed(0)
        joint = PureJoint()
    return train_scnlm_run(
        test_scnlm._scnlm_corpus(), test_scnlm.RUN_CONFIG, out, resume=True, progress=False, device="cpu",
        joint_model=joint, log=lambda s: None, tagger=test_scnlm.fake_tagger,
    )  # fmt: skip


def differing_keys(a, b, path: str = "") -> list[str]:
    """Where two checkpoint-like values differ (key paths; tensors compared exactly)."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        ok = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
        return [] if ok and a.shape == b.shape and torch.equal(a, b) else [path]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path} (keys)"]
        return [p for k in a for p in differing_keys(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{path} (length)"]
        return [
            p for i, (x, y) in enumerate(zip(a, b, strict=True)) for p in differing_keys(x, y, f"{path}[{i}]")
        ]
    return [] if type(a) is type(b) and a == b else [path]


def seconds_after_ready(script: str, args: list[str]) -> float:
    """How long ``script`` runs from its ``ready`` line to its exit, uninterrupted, in a fresh Python
    (where a killed run's moments are drawn: a fresh process is slower than a warm one)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=job_env(),
    )  # fmt: skip
    line = proc.stdout.readline().strip()
    t0 = time.perf_counter()
    proc.communicate(timeout=600)
    if line != "ready" or proc.returncode != 0:
        raise RuntimeError(f"job failed uninterrupted: {line!r}, status {proc.returncode}")
    return time.perf_counter() - t0


def once_exists(path: Path, then_s: float) -> Callable[[], bool]:
    """A moment for :func:`run_and_signal`: ``then_s`` seconds after ``path`` first exists (a job's first
    commit), so the kill lands in the middle of the work rather than in its set-up."""
    seen: list[float] = []

    def due() -> bool:
        if not seen and path.exists():
            seen.append(time.perf_counter())
        return bool(seen) and time.perf_counter() - seen[0] >= then_s

    return due
