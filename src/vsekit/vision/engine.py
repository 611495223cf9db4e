"""Which inference engine runs a frozen CNN for feature extraction: ONNX Runtime or PyTorch.

Feature extraction only ever runs the frozen backbones forward, and ONNX Runtime does that 2-4x faster
than our PyTorch pass on CPU (``bench/results/extract.json``), so it is the default when it is installed
(``engine="auto"``); PyTorch is the fallback, and the only engine of everything that trains.

The ONNX graph is exported from OUR PyTorch module (the BN-folded backbone of
:func:`~vsekit.vision.backbones.prepare_for_inference`), with the input normalisation inside the graph:
it takes the uint8 RGB crops ``[n, crop, crop, 3]`` the input pipeline produces and returns what the
cache stores (:func:`~vsekit.vision.backbones.feature_rows`: the pooled penultimate activations, every FNE
tap concatenated, or the cells of the last conv map or of the last block's map). The file is cached as
``<cache root>/onnx/<backbone>-<layers>-<key>.onnx``, the key hashing the backbone, the weights' sha256,
the layer set, the preprocessing and the exporter (TorchScript exporter, opset, torch and onnx versions).
Exports are atomic (temporary file + rename, under an exclusive lock), so concurrent runs and kills leave
either no file or a whole one.

Beside it, ``<same>.json`` records the file's sha256 and the result of the equivalence check: on first
use, the exported graph and the PyTorch network run on the bundled sample photos, and the largest absolute
difference must stay within :data:`TOLERANCE` times the feature scale (the largest activation). That is
5x below the half-ulp of the float16 the cache stores, so ONNX Runtime rows and PyTorch rows are the same
numbers to the cache's precision, and a feature cache is shared by both engines (the engines are
recorded in its ``meta.json``). A file whose sha256 differs from its record (a damaged or truncated
cache) is exported again, never loaded. A check that fails is one error line under
``engine="onnxruntime"``, and a logged fallback to PyTorch under ``"auto"``.

**int8** (``engine="onnxruntime-int8"``, never chosen by ``auto``): the same graph statically quantised by
ONNX Runtime (QDQ format, per-channel int8 weights, uint8 activations with MinMax ranges calibrated on the
bundled sample photos and their mirror images, 200 inputs), cached beside the float graph with its own
record. Its rows are not the float rows (:data:`INT8_MIN_COSINE` bounds how far they may move, checked on
first use like the float graph), so a feature cache filled by it is keyed apart
(:func:`precision_of`); ``bench/bench_int8.py`` measures its speed and what it does to ranking.

The region path of :mod:`vsekit.vision.regions` stays on PyTorch: it pools boxes of the conv map, so it
would need its own graphs. The int8 graph is for pooled rows only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vsekit.errors import VsekitError
from vsekit.fileio import atomic_write_bytes, atomic_write_json, exclusive_lock, read_json_record
from vsekit.resources import default_cache_root, sample_data_path
from vsekit.vision.backbones import (
    Backbone,
    feature_rows,
    load_backbone,
    prepare_for_inference,
    resolve_weights,
    weights_fingerprint,
)
from vsekit.vision.preprocess import Preprocessing, load_image
from vsekit.vision.spec import FeatureSpec

__all__ = [
    "ENGINES",
    "TOLERANCE",
    "INT8",
    "INT8_MIN_COSINE",
    "OnnxCNN",
    "default_engine",
    "onnx_model_path",
    "onnxruntime_available",
    "precision_of",
    "resolve_engine",
    "set_default_engine",
]

log = logging.getLogger(__name__)

INT8 = "onnxruntime-int8"
ENGINES = ("auto", "onnxruntime", INT8, "torch")
#: Smallest cosine accepted between a photo's int8 features and its PyTorch float features: a guard against
#: a broken quantisation, not a promise of accuracy (measured on the sample: MobileNetV2 mean 0.983, lowest
#: 0.967; EfficientNet-Lite0 mean 0.993, lowest 0.978; ranking effect in bench/results/int8.json).
INT8_MIN_COSINE = 0.95
#: Bumped whenever the quantisation recipe (calibration inputs, method, formats) changes.
INT8_VERSION = 2  # 2: 7-bit weights (reduce_range), for CPUs without VNNI
#: Largest |ONNX Runtime - PyTorch| accepted, relative to the largest |activation| (measured: ~2e-6).
TOLERANCE = 1e-4
OPSET = 17
#: Bumped whenever the exported graph changes (inputs, outputs, normalisation).
GRAPH_VERSION = 1
_CHECK_IMAGES = 4

_default = os.environ.get("VSEKIT_ENGINE", "auto")


def set_default_engine(engine: str) -> None:
    """The engine extraction uses when a call does not name one (the commands' ``--engine``)."""
    global _default
    _default = _checked(engine)


def default_engine() -> str:
    return _checked(_default)


def _checked(engine: str) -> str:
    if engine not in ENGINES:
        raise VsekitError(f"unknown inference engine {engine!r}; known: {', '.join(ENGINES)}")
    return engine


def precision_of(engine: str | None) -> str:
    """``"int8"`` for the int8 engine (None: the default engine), else ``"fp32"``: what a feature cache
    filled by ``engine`` is keyed by."""
    return "int8" if (engine if engine is not None else default_engine()) == INT8 else "fp32"


def onnxruntime_available() -> bool:
    """ONNX Runtime and the exporter's ``onnx`` package are both importable."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_engine(engine: str | None, device: torch.device) -> str:
    """``"onnxruntime"`` or ``"torch"``: the engine ``engine`` (None: the default) means on ``device``.

    ``auto`` is ONNX Runtime when it is installed and can run on ``device`` (CPU, or CUDA with its CUDA
    provider), else PyTorch. Asking for ``onnxruntime`` where it cannot run is an error.
    """
    engine = _checked(engine if engine is not None else default_engine())
    if engine == "torch":
        return "torch"
    if engine == INT8:
        if not onnxruntime_available():
            raise VsekitError(f"--engine {INT8} needs the onnxruntime and onnx packages")
        if device.type != "cpu":
            raise VsekitError(f"--engine {INT8} runs on the CPU; use --device cpu or another engine")
        return INT8
    if not onnxruntime_available():
        if engine == "auto":
            return "torch"
        raise VsekitError(
            "--engine onnxruntime needs the onnxruntime and onnx packages (pip install onnxruntime onnx); "
            "or use --engine torch"
        )
    if _provider(device) is None:
        if engine == "auto":
            return "torch"
        raise VsekitError(
            f"ONNX Runtime has no execution provider for device {device} here; use --engine torch"
        )
    return "onnxruntime"


def _provider(device: torch.device) -> str | None:
    import onnxruntime as ort

    wanted = "CUDAExecutionProvider" if device.type == "cuda" else "CPUExecutionProvider"
    return wanted if wanted in ort.get_available_providers() else None


# ------------------------------------------------------------------ the exported module
class _Exported(nn.Module):
    """uint8 RGB crops [n, h, w, 3] -> what the feature cache stores, float32.

    The normalisation is the same arithmetic, in the same order, as :class:`Preprocessing`'s
    ((x / 255 - mean) / std); the network is the BN-folded backbone.
    """

    mean: torch.Tensor  # buffers
    std: torch.Tensor

    def __init__(self, model: Backbone, layers: str, preprocessing: Preprocessing) -> None:
        super().__init__()
        self.model, self.layers = model, layers
        self.register_buffer("mean", torch.tensor(preprocessing.mean).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(preprocessing.std).view(1, 3, 1, 1))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = pixels.permute(0, 3, 1, 2).float()
        x = (x / 255.0 - self.mean) / self.std
        return feature_rows(self.model, x, self.layers)


def _export_config(spec: FeatureSpec) -> dict[str, Any]:
    import onnx

    assert spec.preprocessing is not None  # FeatureSpec.__post_init__ fills it in
    return {
        "backbone": spec.backbone,
        "weights_sha": weights_fingerprint(resolve_weights(spec.backbone, spec.weights)),
        "layers": spec.layers,
        "preprocessing": spec.preprocessing.key(),
        "exporter": "torchscript",
        "opset": OPSET,
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "graph_version": GRAPH_VERSION,
    }


def onnx_model_path(spec: FeatureSpec, cache_root: str | Path | None = None) -> Path:
    """Where ``spec``'s exported graph is cached (its name changes whenever the graph would)."""
    config = _export_config(spec)
    key = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    return root / "onnx" / f"{spec.backbone}-{spec.layers}-{key}.onnx"


def _torch_model(spec: FeatureSpec) -> Backbone:
    # Module.to(memory_format=...) is documented and works; torch's overloads of Module.to leave it out
    return prepare_for_inference(load_backbone(spec.backbone, spec.weights)).to(  # type: ignore[call-overload]
        memory_format=torch.contiguous_format
    )


def _export(spec: FeatureSpec, model: Backbone, path: Path) -> bytes:
    """Export ``model`` for ``spec`` to ``path`` atomically; returns the file's bytes."""
    assert spec.preprocessing is not None  # FeatureSpec.__post_init__ fills it in
    module = _Exported(model, spec.layers, spec.preprocessing).eval()
    crop = spec.preprocessing.crop
    example = torch.zeros(2, crop, crop, 3, dtype=torch.uint8)
    for stale in path.parent.glob(f"{path.name}.*.tmp"):  # left by a killed export (we hold the lock)
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                (example,),
                str(tmp),
                input_names=["pixels"],
                output_names=["features"],
                dynamic_axes={"pixels": {0: "batch"}, "features": {0: "batch"}},
                opset_version=OPSET,
                dynamo=False,
            )
        data = tmp.read_bytes()
    finally:
        tmp.unlink(missing_ok=True)
    atomic_write_bytes(path, data)
    log.info("exported %s %s to %s", spec.backbone, spec.layers, path)
    return data


def _check_crops(preprocessing: Preprocessing) -> np.ndarray:
    """uint8 crops of the first few bundled sample photos (real photos, always installed)."""
    folder = sample_data_path() / "Images"
    files = sorted(folder.glob("*.jpg"))[:_CHECK_IMAGES]
    if not files:
        raise VsekitError(f"{folder}: no sample photos to check the ONNX export against")
    return np.stack([preprocessing.crop_uint8(load_image(f)) for f in files])


def _compare(session: Any, model: Backbone, spec: FeatureSpec) -> dict[str, float]:
    """Run both engines on the sample photos: ``{max_abs_diff, scale, tolerance, images}``."""
    assert spec.preprocessing is not None  # FeatureSpec.__post_init__ fills it in
    crops = _check_crops(spec.preprocessing)
    with torch.inference_mode():
        x = torch.from_numpy(spec.preprocessing.normalise(crops)).permute(0, 3, 1, 2)
        ref = feature_rows(model, x, spec.layers).numpy()
    got = session.run(None, {"pixels": crops})[0]
    scale = float(np.abs(ref).max())
    diff = float(np.abs(got - ref).max()) if got.shape == ref.shape else float("inf")
    return {
        "max_abs_diff": diff,
        "scale": scale,
        "tolerance": TOLERANCE * max(scale, 1.0),
        "images": len(crops),
    }


def _compare_int8(session: Any, model: Backbone, spec: FeatureSpec) -> dict[str, float]:
    """Run the int8 graph and PyTorch on 16 sample photos: the cosine of each photo's two feature rows."""
    assert spec.preprocessing is not None  # FeatureSpec.__post_init__ fills it in
    crops = _sample_crops(spec.preprocessing)[:16]
    with torch.inference_mode():
        x = torch.from_numpy(spec.preprocessing.normalise(crops)).permute(0, 3, 1, 2)
        ref = feature_rows(model, x, spec.layers).numpy().astype(np.float64)
    got = session.run(None, {"pixels": crops})[0].astype(np.float64)
    if got.shape != ref.shape:
        return {"min_cosine": -1.0, "mean_cosine": -1.0, "images": len(crops)}
    cosine = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1) + 1e-12)
    return {"min_cosine": float(cosine.min()), "mean_cosine": float(cosine.mean()), "images": len(crops)}


def _sample_crops(preprocessing: Preprocessing) -> np.ndarray:
    """uint8 crops of every bundled sample photo (100 real photos, always installed)."""
    files = sorted((sample_data_path() / "Images").glob("*.jpg"))
    if not files:
        raise VsekitError(f"{sample_data_path() / 'Images'}: no sample photos to calibrate int8 with")
    return np.stack([preprocessing.crop_uint8(load_image(f)) for f in files])


def int8_model_path(spec: FeatureSpec, cache_root: str | Path | None = None) -> Path:
    """Where the int8 graph of ``spec`` is cached (beside the float graph it is quantised from)."""
    path = onnx_model_path(spec, cache_root)
    return path.with_name(f"{path.stem}-int8v{INT8_VERSION}.onnx")


def _quantize(float_graph: Path, out: Path, preprocessing: Preprocessing) -> bytes:
    """Static QDQ quantisation of ``float_graph`` into ``out`` (atomic); returns the file's bytes.

    Weights int8 per output channel; activations uint8 with MinMax ranges over the calibration inputs:
    the sample photos and their mirror images (a left-right flip changes no statistic a photo
    collection has, and doubles the inputs the ranges are taken over)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    crops = _sample_crops(preprocessing)
    crops = np.concatenate([crops, crops[:, :, ::-1]]).copy()

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = iter([{"pixels": crops[i : i + 8]} for i in range(0, len(crops), 8)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._batches, None)

    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantiser's advice is logged on the root logger, as warnings
    try:
        quantize_static(
            str(float_graph),
            str(tmp),
            _Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            # 7-bit weights: x86 CPUs without VNNI (AVX2 only) multiply uint8 x int8 pairs into int16 and
            # saturate there; the 8-bit graph moved MobileNetV2's features to a cosine of 0.90 on such a CPU
            reduce_range=True,
        )
        data = tmp.read_bytes()
    finally:
        root.setLevel(level)
        tmp.unlink(missing_ok=True)
    atomic_write_bytes(out, data)
    log.info("quantised %s to int8 in %s", float_graph.name, out)
    return data


class OnnxCNN:
    """The exported backbone in an ONNX Runtime session: uint8 crops -> float32 features.

    Raises VsekitError if the graph does not match PyTorch within :data:`TOLERANCE` (see the module
    docstring); ``check_failed`` tells the caller it may fall back to PyTorch instead.
    """

    def __init__(
        self,
        spec: FeatureSpec,
        device: torch.device,
        cache_root: str | Path | None = None,
        int8: bool = False,
    ) -> None:
        import onnxruntime as ort

        self.spec, self.int8 = spec, int8
        self.provider = _provider(device) or "CPUExecutionProvider"
        self.path = self.float_path = onnx_model_path(spec, cache_root)
        self.check_key = f"{self.provider} onnxruntime {ort.__version__}"
        with exclusive_lock(self.path):
            data, record = self._load_or_export()
            if int8:
                self.path = int8_model_path(spec, cache_root)
                data, record = self._load_or_quantize()
            self.session = self._session(data)
            check = record.get("checks", {}).get(self.check_key)
            if check is None:
                compare = _compare_int8 if int8 else _compare
                check = compare(self.session, _torch_model(spec), spec)
                record.setdefault("checks", {})[self.check_key] = check
                atomic_write_json(self._record_path(), record, indent=1)
        self.check = check
        if int8 and not check["min_cosine"] >= INT8_MIN_COSINE:
            raise OnnxMismatchError(
                f"{self.path}: the int8 graph of {spec.describe()} moves a photo's features to a cosine of "
                f"{check['min_cosine']:.3f} with PyTorch's (at least {INT8_MIN_COSINE} needed); use "
                "--engine onnxruntime"
            )
        if not int8 and not check["max_abs_diff"] <= check["tolerance"]:
            raise OnnxMismatchError(
                f"{self.path}: ONNX Runtime differs from PyTorch on {spec.describe()} by "
                f"{check['max_abs_diff']:.3g} (tolerance {check['tolerance']:.3g}); use --engine torch"
            )

    def _record_path(self) -> Path:
        return self.path.with_suffix(".json")

    def _load_or_quantize(self) -> tuple[bytes, dict[str, Any]]:
        """The int8 graph's bytes and record: the cached file if its sha256 matches, else quantised anew
        from the float graph (held under the float graph's lock)."""
        record = read_json_record(self._record_path())
        if self.path.is_file() and record.get("sha256"):
            data = self.path.read_bytes()
            if hashlib.sha256(data).hexdigest() == record["sha256"]:
                return data, record
            log.warning("%s: does not match its recorded sha256; quantising it again", self.path)
        assert self.spec.preprocessing is not None  # FeatureSpec.__post_init__ fills it in
        data = _quantize(self.float_path, self.path, self.spec.preprocessing)
        config = {**_export_config(self.spec), "int8_version": INT8_VERSION}
        record = {"sha256": hashlib.sha256(data).hexdigest(), "config": config}
        atomic_write_json(self._record_path(), record, indent=1)
        return data, record

    def _load_or_export(self) -> tuple[bytes, dict[str, Any]]:
        """The graph's bytes and record: the cached file if its sha256 matches the record, else a new
        export (a missing, truncated or altered file is never loaded)."""
        record = read_json_record(self._record_path())
        if self.path.is_file() and record.get("sha256"):
            data = self.path.read_bytes()
            if hashlib.sha256(data).hexdigest() == record["sha256"]:
                return data, record
            log.warning("%s: does not match its recorded sha256; exporting it again", self.path)
        data = _export(self.spec, _torch_model(self.spec), self.path)
        record = {"sha256": hashlib.sha256(data).hexdigest(), "config": _export_config(self.spec)}
        atomic_write_json(self._record_path(), record, indent=1)
        return data, record

    def _session(self, data: bytes) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        try:
            return ort.InferenceSession(data, options, providers=[self.provider])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise VsekitError(f"{self.path}: ONNX Runtime cannot load it ({exc}); delete it") from exc

    def __call__(self, crops: np.ndarray) -> np.ndarray:
        """float32 features of uint8 crops ``[n, crop, crop, 3]``."""
        return self.session.run(None, {"pixels": crops})[0]


class OnnxMismatchError(VsekitError):
    """The exported graph's features differ from PyTorch's beyond the tolerance."""
