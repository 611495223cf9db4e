"""The photo index a person uses: :class:`vsekit.retrieval.index.Index` plus what needs a second model.

``vsekit.Index`` is this class. It adds, on top of the index's own search:

* :meth:`Index.explain`: *why this photo* for a sentence: the shipped aligner's alignment of the
  sentence's words with the photo's regions (Karpathy & Fei-Fei 2015, sec. 3.1: each word's best region
  by ``v_i . s_t``, Eq. 8, and the MRF's contiguous segments, Eq. 10-12), boxes in pixels of the upright
  photo. Regions are computed on demand for the photos asked about and kept in a small cache (keyed by
  file, size and modification time, so a changed photo is recomputed).
  With the concept route (the hit was found through an ImageNet class), the class's box too: where the
  CNN sees that class, from its class activation map (Zhou et al. 2016, :mod:`vsekit.vision.cam`).
* :meth:`Index.explain_picture`: the same drawn on the photo.
* ``search(..., rerank=N)``: the index's top ``N`` for a sentence re-ranked by the ``vse+aligner``
  fusion (the joint cosine and the aligner's S_kl on one scale, :mod:`vsekit.alignment.fusion`), with the
  regions of those photos computed as for :meth:`Index.explain` (and cached with them).

The index package cannot do this itself: retrieval and alignment sit side by side in the layers and know
nothing of each other; this module sits above both.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vsekit.errors import VsekitError, command
from vsekit.fileio import file_sha256 as _file_sha256
from vsekit.resources import resolve_model_path
from vsekit.retrieval.answer import Answer, answer, photo_concept, with_score
from vsekit.retrieval.concepts import ConceptRoute
from vsekit.retrieval.index import Index as _StoreIndex
from vsekit.retrieval.index import SearchHit
from vsekit.retrieval.relocate import moved_hint
from vsekit.retrieval.text_engine import TextTower
from vsekit.vision.preprocess import decode_image, load_image

if TYPE_CHECKING:  # the aligner and the CNNs (torch) load when a photo is explained: a search needs none
    from vsekit.alignment.fusion import FusionSpec
    from vsekit.alignment.model import Aligner
    from vsekit.embedding.pipeline import ImageInput
    from vsekit.vision.cam import ClassMaps, FeatureMap

__all__ = ["Index"]

logger = logging.getLogger(__name__)

#: Photos whose regions are kept in memory (about 100 KB each for the shipped aligner).
REGION_CACHE = 256
#: Photos whose last conv map is kept for concept boxes (1280 x 7 x 7 to 7 x 28 floats: 250 KB to 1 MB).
MAP_CACHE = 32


class _RegionCache:
    """The aligner's regions of recently explained photos (LRU), computed one photo at a time."""

    def __init__(self, size: int = REGION_CACHE) -> None:
        self.size = size
        self._items: OrderedDict[tuple, tuple[Any, Any, tuple[int, int]]] = OrderedDict()
        self._lock = threading.Lock()
        self._aligner: Aligner | None = None

    def aligner(self) -> Aligner:
        with self._lock:
            if self._aligner is None:
                from vsekit.alignment.model import Aligner

                self._aligner = Aligner.load()
            return self._aligner

    def regions(self, path: Path) -> tuple[Any, list[list[int]], tuple[int, int]]:
        """``(features [R, D], boxes in photo pixels, (width, height))`` of the upright photo at ``path``."""
        return self.regions_of([path])[0]

    def regions_of(self, paths: list[Path]) -> list[tuple[Any, list[list[int]], tuple[int, int]]]:
        """:meth:`regions` of several photos; the ones not cached go through the CNN in one batch."""
        keys = [_file_key(path) for path in paths]
        with self._lock:
            missing = [(k, p) for k, p in zip(keys, paths, strict=True) if k not in self._items]
        if missing:
            from vsekit.alignment.describe import scale_boxes

            aligner = self.aligner()
            images = [load_image(p) for _, p in missing]
            with self._lock:  # one forward pass at a time, like the joint model's
                found = aligner.regions(images, cache=False, progress=False)
                for i, ((key, _), image) in enumerate(zip(missing, images, strict=True)):
                    boxes = scale_boxes(found.boxes[i], image.size)
                    self._items[key] = (found.features[i], boxes, image.size)
        with self._lock:
            values = []
            for key in keys:
                self._items.move_to_end(key)
                values.append(self._items[key])
            while len(self._items) > max(self.size, len(keys)):
                self._items.popitem(last=False)
        return values


class _ConceptBoxes:
    """Concept boxes (:mod:`vsekit.vision.cam`): one CNN per backbone, and the last conv maps of recently
    explained photos (LRU, keyed like the regions), so another query on the same photo costs no CNN pass."""

    def __init__(self, size: int = MAP_CACHE) -> None:
        self.size = size
        self._maps: dict[str, ClassMaps] = {}
        self._items: OrderedDict[tuple, FeatureMap] = OrderedDict()
        self._lock = threading.Lock()

    def box(self, backbone: str, path: Path, class_id: int, size: tuple[int, int]) -> list[int]:
        """The box of class ``class_id`` on the upright photo at ``path`` of ``size`` (width, height), in
        its pixels (scaled from fractions as the aligner's boxes are)."""
        from vsekit.alignment.describe import scale_boxes
        from vsekit.vision.cam import ClassMaps

        key = (backbone, *_file_key(path))
        with self._lock:
            if backbone not in self._maps:
                self._maps[backbone] = ClassMaps(backbone)
            maps, features = self._maps[backbone], self._items.get(key)
        if features is None:
            side = maps.preprocessing.resize  # the map's input is no larger: JPEG may decode smaller
            features = maps.feature_map(decode_image(path, draft=(side, side)))
        with self._lock:
            self._items[key] = features
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return scale_boxes([maps.box(features, class_id)], size)[0]


def _file_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns)


class Index(_StoreIndex):
    """A photo index (see :class:`vsekit.retrieval.index.Index`) that can also say why a photo matched."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._regions = _RegionCache()
        self._fusion: FusionSpec | None = None
        self._route: tuple[int, ConceptRoute] | None = None
        self._concept_boxes = _ConceptBoxes()

    def answer(self, text: str | None = None, image: ImageInput | None = None, **kwargs: Any) -> Answer:
        """The whole answer to a query (:func:`vsekit.retrieval.answer.answer`): the hits, whether no
        photo matches well (``weak``), a language warning, which routes searched; what the CLI, the web
        API and the page show. Keywords as :meth:`search`."""
        return answer(self, text, image, **kwargs)

    def search(
        self, text: str | None = None, image: ImageInput | None = None, *, rerank: int = 0, **kwargs: Any
    ) -> list[SearchHit]:
        """The hits of :meth:`answer`: for a sentence both routes fused (the joint space and the concept
        route, when the model ships their fusion and the index has its photos' classes), else the joint
        space (:meth:`search_joint`); ``rerank=N`` (a sentence query without arithmetic) re-orders the top
        ``N`` by the ``vse+aligner`` fusion, and a re-ranked hit's ``score`` is that fused score."""
        return self.answer(text, image, rerank=rerank, **kwargs).hits

    def search_joint(
        self, text: str | None = None, image: ImageInput | None = None, **kwargs: Any
    ) -> list[SearchHit]:
        """The joint space alone (:meth:`vsekit.retrieval.index.Index.search`): cosine scores."""
        return super().search(text, image, **kwargs)

    def concept_route(self, margin: float) -> ConceptRoute:
        """The concept route for this index's model (its frozen MiniLM shared, in PyTorch or as the ONNX
        graph of its text side: :meth:`text_side`), made once per model."""
        side = self.text_side()
        if self._route is None or self._route[0] != id(side) or self._route[1].margin != margin:
            encoder = side if isinstance(side, TextTower) else getattr(side.network, "text_encoder", None)
            self._route = (id(side), ConceptRoute.create(encoder, margin))
        return self._route[1]

    def caption_photos(
        self, captioner: Any, chunk_size: int = 16, progress: Callable[[int, int], None] | None = None
    ) -> dict[str, str]:
        """Store ``captioner``'s best caption (``describe_files``, e.g. :func:`vsekit.load_captioner`'s)
        for every photo that has none: new photos and photos changed since their caption. Stored a chunk
        at a time, so an interrupted run keeps what it finished and the next run does only the rest.
        ``progress(done, total)`` after each chunk. Returns ``{photo id: reason}`` for photos that could
        not be read (they keep no caption and are tried again next time)."""
        todo = self.uncaptioned()
        failed: dict[str, str] = {}
        for start in range(0, len(todo), chunk_size):
            ids = todo[start : start + chunk_size]
            described = captioner.describe_files([self.photos_dir / i for i in ids], n=1)
            captions = {i: d.captions[0] for i, d in zip(ids, described, strict=True) if d.captions}
            failed.update({i: str(d.error) for i, d in zip(ids, described, strict=True) if not d.captions})
            self.set_captions(captions)
            if progress is not None:
                progress(min(start + chunk_size, len(todo)), len(todo))
        return failed

    def rerank(self, text: str, hits: list[SearchHit], n: int) -> list[SearchHit]:
        """``hits`` of sentence ``text`` (best first) with the joint space's hits among the first ``n``
        re-ordered by the fusion, in the places they held (their scores become fused scores); the concept
        route's hits and the rest stay. The aligner knows Flickr8K's words only: re-ordering every hit cost
        the everyday validation set a third of its fitting top-5 photos (bench/results/rerank.json)."""
        head, tail = hits[:n], hits[n:]
        slots = [i for i, h in enumerate(head) if h.route in (None, "joint")]
        if len(slots) < 2:
            return list(hits)
        out = list(head)
        for i, hit in zip(slots, self._rerank(text, [head[i] for i in slots]), strict=True):
            out[i] = hit
        return out + tail

    def rerank_available(self) -> bool:
        """Whether :meth:`search` can re-rank here: the index holds the fusion's joint model's vectors."""
        try:
            self._fusion_spec()
        except VsekitError:
            return False
        return True

    def _rerank(self, text: str, hits: list[SearchHit]) -> list[SearchHit]:
        spec = self._fusion_spec()
        found = self._regions.regions_of([self.photos_dir / h.path for h in hits])
        features = np.stack([f for f, _, _ in found])
        s_kl = self._regions.aligner().score_matrix(features, [text])[:, 0]
        cosine = np.array([h.score if h.joint is None else h.joint for h in hits], dtype=np.float64)
        fused = spec.fuse(cosine, s_kl)
        order = np.argsort(-fused, kind="stable")
        return [with_score(hits[i], float(fused[i])) for i in order]

    def _fusion_spec(self) -> FusionSpec:
        """The shipped fusion's weights, if this index holds the fusion's joint model's vectors."""
        if self._fusion is None:
            from vsekit.alignment.fusion import FUSION_NAME, FusionSpec, fusion_path

            spec = FusionSpec.from_file(fusion_path(FUSION_NAME))
            joint = resolve_model_path(spec.joint, "vse")
            if _file_sha256(joint) != self.manifest["model"]["sha256"]:
                raise VsekitError(
                    f"rerank uses the {FUSION_NAME} fusion, whose joint model is {spec.joint}; "
                    f"this index was built with {Path(str(self.manifest['model']['name'])).name}"
                )
            self._fusion = spec
        return self._fusion

    def _photo_path(self, photo: int | str) -> tuple[int, str, Path]:
        """``(row, id, file)`` of a photo given by its row (as in a search hit) or its path in the folder."""
        if isinstance(photo, int):
            if not 0 <= photo < len(self.paths):
                raise VsekitError(f"no photo with id {photo} (the index holds {len(self.paths)})")
            row, rel = photo, self.paths[photo]
        else:
            rel, paths = str(photo), list(self.paths)
            if rel not in paths:
                raise VsekitError(f"{rel}: not a photo of this index")
            row = paths.index(rel)
        path = self.photos_dir / rel
        if not self.photos_dir.is_dir():
            missing = f"{rel}: the photo folder {self.photos_dir} is not there"
            raise VsekitError(f"{missing}; {moved_hint(self.path)}")
        if not path.is_file():
            raise VsekitError(
                f"{rel}: the photo is no longer in {self.photos_dir.name}/; "
                f"{command('index', 'update', self.path)} drops it from the index"
            )
        return row, rel, path

    def explain(self, photo: int | str, text: str, beta: float = 1.0) -> dict[str, Any]:  # DEFAULT_BETA
        """Why ``photo`` (a hit's id or its path) matches ``text``: ``{"path", "width", "height",
        "words": [{"word", "box", "score"}], "segments": [{"text", "box", "score"}]}``; each word's best
        region (Eq. 8's max) and the MRF's segments (Eq. 10-12, ``beta``), boxes ``[x0, y0, x1, y1]`` in
        pixels of the upright photo. Words the aligner does not know are shown as ``<unk>``. When a search
        for ``text`` labels this photo with a class (the concept route, :func:`photo_concept`), also
        ``"concept": {"label", "box", "probability"}``: the class, where the CNN sees it (its class
        activation map's box, :mod:`vsekit.vision.cam`) and the photo's stored probability of it."""
        if not isinstance(text, str) or not text.strip():
            raise VsekitError("empty query: give a sentence to explain")
        from vsekit.alignment.mrf import mrf_align, segments

        row, rel, path = self._photo_path(photo)
        features, boxes, (width, height) = self._regions.regions(path)
        words, dots = self._regions.aligner().word_region_scores(features, text)  # [n_words, R]
        best = dots.argmax(axis=1)
        chain, _ = mrf_align(dots, beta)
        result: dict[str, Any] = {
            "path": rel,
            "width": int(width),
            "height": int(height),
            "words": [
                {"word": word, "box": _box(boxes[r]), "score": round(float(dots[t, r]), 4)}
                for t, (word, r) in enumerate(zip(words, best, strict=True))
            ],
            "segments": [
                {
                    "text": " ".join(words[a:b]),
                    "box": _box(boxes[r]),
                    "score": round(float(dots[a:b, r].sum()), 4),
                }
                for a, b, r in segments(chain)
            ],
        }
        concept = self._concept(row, path, text, (int(width), int(height)))
        return result | ({"concept": concept} if concept else {})

    def _concept(self, row: int, path: Path, text: str, size: tuple[int, int]) -> dict[str, Any] | None:
        """:meth:`explain`'s ``concept`` for the photo at ``row`` (file ``path``, ``size``), or None."""
        found = photo_concept(self, text, row)
        if found is None:
            return None
        backbone = str(self.manifest["concepts"]["backbone"])
        box = self._concept_boxes.box(backbone, path, found.class_id, size)
        return {"label": found.label, "box": box, "probability": round(found.probability, 4)}

    def explain_picture(
        self, photo: int | str, text: str, out: str | os.PathLike[str], beta: float = 1.0
    ) -> Path:
        """:meth:`explain` drawn on the full-size upright photo: each segment's region boxed and labelled,
        and the concept's box (if any) in its own colour, labelled "<class> · concept"."""
        from vsekit.alignment.align import draw_alignment

        result = self.explain(photo, text, beta)
        _, _, path = self._photo_path(photo)
        distinct: list[list[int]] = []  # the segments' boxes, each once, in order
        labelled = []
        for seg in result["segments"]:
            if seg["box"] not in distinct:
                distinct.append(seg["box"])
            labelled.append({"region": distinct.index(seg["box"]), "text": seg["text"]})
        drawn = {"boxes": distinct, "segments": labelled, "concept": result.get("concept")}
        return draw_alignment(load_image(path), drawn, out)


def _box(box: Any) -> list[int]:
    return [int(round(float(v))) for v in box]
