"""The model cards (`vsekit models`, docs/models.md) cannot drift from what ships: cards.json is what the
model files and bench/results say, every shipped file has a card with its size and checksums, and the
command prints them without importing a model library."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vsekit.cli import app
from vsekit.fileio import content_fingerprint
from vsekit.resources import (
    MODEL_CARDS,
    PACKAGE_DIR,
    PRETRAINED,
    PREVIOUS_DIR,
    model_cards,
    previous_models,
)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_DIR = PACKAGE_DIR / "pretrained"


def _generator():
    spec = importlib.util.spec_from_file_location("model_cards", ROOT / "ship" / "model_cards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen():
    return _generator()


def test_the_cards_are_what_the_model_files_and_bench_json_say(gen):
    assert gen.render(gen.build_cards()) == MODEL_CARDS.read_text(encoding="utf-8"), (
        "run make cards (python ship/model_cards.py && python docs/gen_tables.py)"
    )


def test_every_shipped_file_has_a_card_with_its_size_and_checksums():
    cards = model_cards()
    assert [c["name"] for c in cards] == list(PRETRAINED), "one card per shipped model name, in order"
    described = {}
    for card in cards:
        assert card["file"]["name"] == PRETRAINED[card["name"]][0]
        described[card["file"]["name"]] = card["file"]
        described.update({a["name"]: a for a in card["attachments"]})
    on_disk = sorted(p.name for p in SHIPPED_DIR.iterdir() if p.is_file() and p != MODEL_CARDS)
    assert sorted(described) == on_disk, (
        "a file in src/vsekit/pretrained/ without a card, or a card without its file"
    )
    for name, facts in described.items():
        data = (SHIPPED_DIR / name).read_bytes()
        assert facts["bytes"] == len(data), name
        assert facts["sha256"] == hashlib.sha256(data).hexdigest(), name
        assert facts["content_sha256"] == content_fingerprint(SHIPPED_DIR / name), name


def test_the_pins_between_shipped_files_hold():
    """The captioner's rerank model, the fusion's models and the confidence threshold's model are the
    shipped files (a re-shipped `vse` without re-tuning them would show here and on the cards)."""
    for card in model_cards():
        assert card.get("pin_matches", True), card["name"]
        for extra in card["attachments"]:
            assert extra["pin_matches"], extra["name"]


def test_every_kept_earlier_release_is_whole():
    """A `vse` file replaced by a later release is kept for the indexes built with it: the file
    previous.json names, with that sha256, and beside it its calibrations, pinned to it."""
    kept = previous_models()
    listed = json.loads((PREVIOUS_DIR / "previous.json").read_text(encoding="utf-8"))["models"]
    assert len(kept) == len(listed), "previous.json names a file that is not there"
    on_disk = {p.name for p in PREVIOUS_DIR.iterdir()}
    named = {"previous.json"}
    for entry in kept:
        assert hashlib.sha256(entry["path"].read_bytes()).hexdigest() == entry["sha256"], entry["file"]
        assert entry["path"] != PACKAGE_DIR / "pretrained" / PRETRAINED[entry["name"]][0]
        named.add(entry["path"].name)
        for kind in ("confidence", "routes", "arithmetic"):
            sidecar = entry["path"].with_name(f"{entry['path'].stem}-{kind}.json")
            assert json.loads(sidecar.read_text(encoding="utf-8"))["model_sha256"] == entry["sha256"]
            named.add(sidecar.name)
    assert on_disk == named, "a file in pretrained/previous/ that previous.json does not account for"


def edit_bench_json(gen, monkeypatch, name, edit) -> None:
    """Make the card generator read ``bench/results/<name>`` changed by ``edit(data)`` (a copy)."""
    real = gen.load

    def load(wanted):
        data = copy.deepcopy(real(wanted))
        if wanted == name:
            edit(data)
        return data

    monkeypatch.setattr(gen, "load", load)


def test_a_number_changed_in_the_bench_json_changes_the_cards(gen, monkeypatch):
    def edit(data):  # the shipped bow's source (ship/reselect_joint.py)
        data["selection"]["chosen"]["rsum"] += 1.0

    edit_bench_json(gen, monkeypatch, "bow_reselect.json", edit)
    assert gen.render(gen.build_cards()) != MODEL_CARDS.read_text(encoding="utf-8")


def test_a_model_file_and_a_bench_json_that_disagree_are_refused(gen, monkeypatch):
    """A file re-shipped without re-running its benchmark: its header's dev rsum is not the JSON's."""

    def edit(data):
        data["retrain"]["dev"]["rsum"] -= 5.0

    edit_bench_json(gen, monkeypatch, "bow_reselect.json", edit)
    with pytest.raises(
        SystemExit, match=r"bow dev rsum: the model file says 224\.28, bench/results says 219\.3"
    ):
        gen.build_cards()


def test_the_aligner_card_refuses_a_selection_json_of_another_file(gen, monkeypatch):
    """The tuned aligner chosen on val1000: its header's dev numbers and members must be the ones that
    bench/results/aligner_text_finetune.json records for the retrained pair and the val1000 choice."""

    def lower_dev(data):
        data["retrained_pack"]["dev_float16"]["rsum"] -= 5.0

    edit_bench_json(gen, monkeypatch, "aligner_text_finetune.json", lower_dev)
    pattern = r"aligner dev rsum \(aligner_text_finetune\.json\): the model file says 239\.82"
    with pytest.raises(SystemExit, match=pattern):
        gen.card_aligner()

    def other_choice(data):
        data["packings"]["chosen"] = "ft1 e8 + ft1 e10"

    monkeypatch.undo()
    edit_bench_json(gen, monkeypatch, "aligner_text_finetune.json", other_choice)
    with pytest.raises(SystemExit, match=r"val1000 chose ft1 e8 \+ ft1 e10"):
        gen.card_aligner()


def test_vsekit_models_lists_every_card(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # the table's cells unwrapped, to find them whole
    result = CliRunner().invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    for card in model_cards():
        assert card["name"] in result.output
        assert card["dev"]["headline"] in result.output
        for extra in card["attachments"]:
            assert extra["name"] in result.output


def test_vsekit_models_name_gives_the_full_card_and_json_gives_it_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    runner = CliRunner()
    card = next(c for c in model_cards() if c["name"] == "captioner")
    shown = runner.invoke(app, ["models", "captioner"])
    assert shown.exit_code == 0, shown.output
    words = " ".join(shown.output.replace("│", " ").split())  # a long value wraps inside the table's border
    for text in (card["file"]["content_sha256"], card["selection"], card["speed"], card["recipe"]):
        assert text in words, text
    as_json = runner.invoke(app, ["models", "captioner", "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output) == card
    every = runner.invoke(app, ["models", "--json"])
    assert json.loads(every.output) == model_cards()


def test_an_unknown_model_is_one_line_listing_the_shipped_ones():
    result = CliRunner().invoke(app, ["models", "vse2"])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "unknown shipped model 'vse2'" in result.output
    assert "captioner" in result.output


def test_vsekit_models_imports_no_model_library():
    code = (
        "import sys\nfrom vsekit.cli import app\nfrom typer.testing import CliRunner\n"
        "r = CliRunner().invoke(app, ['models'])\nassert r.exit_code == 0, r.output\n"
        "assert CliRunner().invoke(app, ['models', 'vse', '--json']).exit_code == 0\n"
        "print(sorted(m for m in ('torch', 'numpy', 'PIL', 'safetensors', 'faiss') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
