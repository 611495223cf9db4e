"""The FastAPI app: one static page and a JSON API over a photo :class:`~vsekit.api.Index`.

``GET /`` the page; ``GET /api/search?q=&k=`` (and ``rerank``, ``folder``, ``taken_after``, ``taken_before``);
``POST /api/search/image`` (multipart ``file``, query ``k``, ``keep_query`` and the filters); ``POST
/api/arithmetic`` (form: ``q`` or ``file`` or ``id``, ``minus``, ``plus``, ``weight``, ``k``, ``resort``,
``keep_query``);
``GET /api/similar/{id}`` (``k``, ``keep_query`` and the filters; a photo query leaves the photo searched by
and its exact copies out unless ``keep_query=true``, and says which in ``left_out``); ``POST /api/caption``
(multipart ``file``); ``GET /api/caption/{id}``; ``GET /api/thumb/{id}``; ``GET /api/info``; for the page:
``GET /api/photo/{id}`` (the full-size view), ``GET /api/explain/{id}?q=`` (why this photo), ``GET
/api/duplicates?threshold=``, ``GET /api/photos?offset=&limit=`` (the browse view: every photo, newest date
taken first) and ``GET /api/original/{id}`` (the original file; ``download=true``: as an attachment); ``GET
/docs`` (Swagger UI, served from this server: it works offline) and ``GET /openapi.json``. Results are
``{"results": [{"id", "path", "score"}]}``; every error is ``{"error": message}`` with a 4xx status.

Safety: requests must name an allowed host and POSTs must come from it (:mod:`vsekit.serve.origins`);
photos are addressed by row id only (never by a path from the request); uploads are bounded in bytes
(413, a chunked body cut as soon as it passes the limit), in time (a body or a request head that trickles
in is a 408: :mod:`vsekit.serve.timeouts`) and in pixels, and are sniffed by content; indexed photos go
through the same decode, with their own limits; queries are bounded in length; nothing from a request is
unpickled; no answer names an absolute path. Decoding, the CNN and the captioner run in worker threads
(two for uploads, four for indexed photos), so a large upload never holds up text search or info.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

import anyio
from fastapi import Depends, FastAPI, File, Form, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from PIL import Image
from starlette.exceptions import HTTPException

from vsekit.api import Index, SearchHit, load_captioner
from vsekit.errors import ImageError, VsekitError
from vsekit.retrieval.answer import Answer
from vsekit.retrieval.duplicates import DEFAULT_THRESHOLD, find_duplicates
from vsekit.serve.docs import add_docs_routes
from vsekit.serve.origins import HostGuard, allowed_hosts
from vsekit.serve.timeouts import BodyGuard, header_deadline_protocol
from vsekit.serve.uploads import UploadError, decode_upload
from vsekit.vision.preprocess import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, decode_image

__all__ = ["ServeSettings", "bind", "create_app", "run", "uvicorn_config"]

logger = logging.getLogger(__name__)

MAX_QUERY = 1000
MAX_WORDS = 8
ENVELOPE = 64 * 1024  # room for the multipart envelope around an upload of max_upload_bytes


@dataclass(frozen=True)
class ServeSettings:
    """Limits: upload bytes (20 MB) and decoded pixels (40 megapixels); indexed photos' bytes and pixels
    (the library's defaults: 1 GiB, ~179 megapixels); results per request; thumbnail side; seconds a
    request body may take to arrive (60: 20 MB at 2.7 Mbit/s; a slower body is a 408) and a request head
    (10); the address the server is bound to and the extra host names it answers to (``allow_hosts``,
    ``vsekit serve --allow-host``); how often the index looks for a newer committed generation."""

    max_upload_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 40_000_000
    max_photo_bytes: int = DEFAULT_MAX_BYTES
    max_photo_pixels: int = DEFAULT_MAX_PIXELS
    max_k: int = 100
    thumb_side: int = 256
    photo_side: int = 2048  # the page's full-size view (GET /api/photo/{id}): long side in pixels
    captions: int = 3
    body_timeout_s: float = 60.0
    header_timeout_s: float = 10.0
    host: str = "127.0.0.1"
    allow_hosts: tuple[str, ...] = ()
    refresh_s: float = 1.0
    rerank_max: int = 50  # /api/search?rerank=N: at most this many top hits re-ranked by the fusion
    browse_max: int = 200  # /api/photos?limit=N: at most this many photos a page


class _Captioner:
    """The shipped captioner, loaded on first use and used by one request at a time."""

    def __init__(self, factory: Any = None) -> None:
        self._factory = factory or load_captioner
        self._captioner: Any = None  # what the factory makes (the shipped CaptionGenerator)
        self._lock = threading.Lock()

    def describe(self, image: Image.Image | Path, n: int) -> list[str]:
        with self._lock:
            if self._captioner is None:
                self._captioner = self._factory()
            return self._captioner.describe([image], n=n)[0]


class _LiveIndex:
    """The index the server answers from. Between requests, at most once per ``interval`` seconds, it
    moves to the newest committed generation (``Index.refresh``, where the store provides it); a request
    holds the index it started with."""

    def __init__(self, index: Index | None, interval: float) -> None:
        self.index, self.interval = index, interval
        self._next = 0.0
        self._lock = threading.Lock()

    def current(self) -> Index:
        index = self.index
        assert index is not None  # an app made without an index (create_app(None)) only gives its schema
        refresh = getattr(index, "refresh", None)
        if refresh is None or time.monotonic() < self._next or not self._lock.acquire(blocking=False):
            return index
        try:
            self._next = time.monotonic() + self.interval
            newer = refresh()
            if isinstance(newer, Index):  # a refresh that returns the newer index rather than moving
                self.index = index = newer
        except VsekitError as exc:  # a damaged newer generation: keep answering from the one we hold
            logger.warning("index not refreshed (still serving the generation it holds): %s", exc)
        finally:
            self._lock.release()
        return index


def _printable(text: str) -> str:
    """``text`` as valid UTF-8: a file name's bytes that are not UTF-8 (lone surrogates from
    ``os.fsdecode``) written as ``\\xNN``; JSON cannot carry the surrogates (a 500 otherwise)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file-name decoding made
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _results(hits: list[SearchHit], index: Index | None = None) -> dict[str, Any]:
    """Hits as JSON; with ``index``, each hit's stored caption (``vsekit index build --captions``)."""
    captions = index.captions([h.path for h in hits]) if index is not None else {}
    results = []
    for h in hits:
        result = {"id": h.id, "path": _printable(h.path), "score": round(h.score, 6)}
        if h.route is not None:  # a sentence searched by both routes: which one found it, and as what
            result |= {"joint": round(h.joint or 0.0, 6), "concept": round(h.concept or 0.0, 6)}
            result |= {"route": h.route, "label": h.label}
        if captions.get(h.path):
            result["caption"] = captions[h.path]
        results.append(result)
    return {"results": results}


def _answered(found: Answer, index: Index) -> dict[str, Any]:
    """A photo query's answer as JSON: its hits and what it left out (``left_out``); with plus/minus words,
    the rule the arithmetic used (``arithmetic``: its weight and phrase)."""
    body = found.to_json()
    out = {**_results(found.hits, index), "left_out": body["left_out"] or []}
    return out if body["arithmetic"] is None else out | {"arithmetic": body["arithmetic"]}


def _words(value: str | None) -> list[str]:
    """Comma-separated words or phrases (bounded)."""
    words = [w.strip() for w in (value or "").split(",") if w.strip()]
    if len(words) > MAX_WORDS or any(len(w) > 100 for w in words):
        raise UploadError(f"at most {MAX_WORDS} minus/plus words of up to 100 characters")
    return words


def _photo_path(index: Index, photo_id: int) -> Path:
    """The indexed file of row ``photo_id``; a path from the manifest, checked to stay in the folder."""
    if not 0 <= photo_id < len(index):
        raise HTTPException(404, f"no photo with id {photo_id} (the index holds {len(index)})")
    rel = PurePosixPath(index.paths[photo_id])
    if rel.is_absolute() or ".." in rel.parts:
        raise HTTPException(404, f"no photo with id {photo_id}")
    return index.photos_dir / rel


def _image_http_error(exc: ImageError) -> HTTPException:
    """An indexed photo that cannot be shown: gone (404) or no longer a photo we decode (422)."""
    return HTTPException(404 if exc.kind == "missing" else 422, str(exc))


def _open_photo(index: Index, photo_id: int, settings: ServeSettings) -> Image.Image:
    """Row ``photo_id``'s photo as it is on disk now, through the one decode and the photo limits."""
    path = _photo_path(index, photo_id)
    try:
        return decode_image(
            path,
            name=index.paths[photo_id],
            max_pixels=settings.max_photo_pixels,
            max_bytes=settings.max_photo_bytes,
        )
    except ImageError as exc:
        raise _image_http_error(exc) from None


def _photo_jpeg(path: Path, name: str, settings: ServeSettings, full: bool = False) -> bytes:
    """A thumbnail (at most ``thumb_side`` pixels a side) or the lightbox's full-size view (``photo_side``)
    as a JPEG, upright, through the one decode and the photo limits; cached per file version."""
    try:
        st = path.stat()
    except OSError:
        raise HTTPException(404, f"photo {name} can no longer be read (file not found)") from None
    render = _full_size_of if full else _thumbnail_of
    try:
        return render(path, name, st.st_size, st.st_mtime_ns, settings)
    except ImageError as exc:
        raise _image_http_error(exc) from None


def _jpeg(
    path: Path, name: str, settings: ServeSettings, side: int, quality: int, resample: Image.Resampling
) -> bytes:
    limits = {"max_pixels": settings.max_photo_pixels, "max_bytes": settings.max_photo_bytes}
    img = decode_image(path, name=name, draft=(side, side), **limits)
    img.thumbnail((side, side), resample)
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=quality)
    return out.getvalue()


@functools.lru_cache(maxsize=1024)  # size and mtime_ns: a photo changed in place is read again
def _thumbnail_of(path: Path, name: str, size: int, mtime_ns: int, settings: ServeSettings) -> bytes:
    return _jpeg(path, name, settings, settings.thumb_side, 85, Image.Resampling.BICUBIC)


@functools.lru_cache(maxsize=32)
def _full_size_of(path: Path, name: str, size: int, mtime_ns: int, settings: ServeSettings) -> bytes:
    return _jpeg(path, name, settings, settings.photo_side, 88, Image.Resampling.LANCZOS)


_ABSOLUTE = re.compile(r"(?<![\w.~:/])/(?:[^\s/'\"(),;]+/)+([^\s/'\"(),;]+)")


def _public_name(name: str) -> str:
    """A model's shipped name as it is; a model file's name without its folder."""
    return PurePath(name).name if ("/" in name or "\\" in name) else name


def _scrub(message: str, index: Index | None) -> str:
    """``message`` without absolute paths: photos relative to their folder, the index and model by name,
    anything else absolute by its last part (an answer must not tell a web page where files live)."""
    if index is not None:
        roots = [(str(index.photos_dir).rstrip("/") + "/", ""), (str(index.path), index.path.name)]
        model = str(index.manifest.get("model", {}).get("name", ""))
        if model.startswith("/"):
            roots.append((model, _public_name(model)))
        for root, short in sorted(roots, key=lambda r: -len(r[0])):
            message = message.replace(root, short)
    return _ABSOLUTE.sub(r"\1", message)


def _install_errors(app: FastAPI, live: _LiveIndex) -> None:
    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": _printable(_scrub(message, live.index))}, status_code=status)

    @app.exception_handler(UploadError)
    async def _upload(_: Request, exc: UploadError) -> JSONResponse:
        return error(exc.status, str(exc))

    @app.exception_handler(VsekitError)
    async def _vsekit(_: Request, exc: VsekitError) -> JSONResponse:
        return error(400, str(exc))

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return error(422, f"{where}: {first.get('msg', 'invalid request')}")

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("internal error", exc_info=exc)
        return error(500, f"internal error ({type(exc).__name__}); the server log has the details")

    @app.middleware("http")
    async def _limit_body(request: Request, call_next: Any) -> Response:
        length = request.headers.get("content-length")
        limit = app.state.settings.max_upload_bytes + ENVELOPE
        if length is not None and not (length.isascii() and length.isdigit()):
            return error(400, f"bad Content-Length header {length[:40]!r}: not a number of bytes")
        if length is not None and int(length) > limit:
            return error(413, f"request body over {app.state.settings.max_upload_bytes} bytes")
        return await call_next(request)


class _Workers:
    """Threads for the slow work, so the event loop keeps answering: two for uploads (decode, CNN,
    captioner; two at once bounds the memory of large decodes), four for indexed photos (thumbnails,
    captions). Text search and info run in the server's own thread pool, apart from both."""

    def __init__(self) -> None:
        self._limiters: dict[str, anyio.CapacityLimiter] = {}

    async def run(self, kind: str, fn: Callable[..., Any], *args: Any) -> Any:
        if kind not in self._limiters:  # made inside the event loop that uses it
            self._limiters[kind] = anyio.CapacityLimiter(2 if kind == "upload" else 4)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiters[kind])


def create_app(
    index: Index | None, settings: ServeSettings | None = None, captioner_factory: Any = None
) -> FastAPI:
    """The app over ``index`` (``captioner_factory``: what makes the captioner; default the shipped one)."""
    settings = settings or ServeSettings()
    app = FastAPI(
        title="vsekit photo search",
        description="Search photos by text, photo or arithmetic.",
        docs_url=None,  # the CDN pages; add_docs_routes serves Swagger UI from this server instead
        redoc_url=None,
    )
    app.state.settings = settings
    live = _LiveIndex(index, settings.refresh_s)
    app.state.live_index = live
    _install_errors(app, live)
    # outermost last: the Host/Origin rule first, then the body's time and byte bounds
    app.add_middleware(
        BodyGuard, seconds=settings.body_timeout_s, max_bytes=settings.max_upload_bytes + ENVELOPE
    )
    hosts, any_ip = allowed_hosts(settings.host, settings.allow_hosts)
    app.add_middleware(HostGuard, hosts=hosts, any_ip=any_ip)

    def _current_index() -> Index:
        """The index of this request: the newest committed generation, checked at most once a second."""
        return live.current()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> str:
        return resources.files("vsekit.serve").joinpath("static/index.html").read_text(encoding="utf-8")

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        """Photo count, the index's folder name, the model's name (a shipped name or a file name) and the
        search engine; never an absolute path."""
        index = _current_index()
        details = index.info()
        return {
            "count": details["count"],
            "index": _printable(index.path.name),
            "model": _printable(_public_name(str(details["model"]))),
            "engine": details["engine"],
            **_page_info(index, settings),
        }

    add_docs_routes(app)
    workers = _Workers()
    _add_search_routes(app, _current_index, settings, workers)
    _add_photo_routes(app, _current_index, settings, _Captioner(captioner_factory), workers)
    _add_page_routes(app, _current_index, settings, workers)
    _add_browse_routes(app, _current_index, settings)
    return app


async def _upload_bytes(file: UploadFile, settings: ServeSettings) -> bytes:
    return await file.read(settings.max_upload_bytes + 1)


def _query_filters(
    folder: str | None = Query(None, max_length=500),
    taken_after: str | None = Query(None, max_length=40),
    taken_before: str | None = Query(None, max_length=40),
) -> dict[str, Any]:
    """The filters every search route takes (a dependency, so each route declares them once): ``folder``
    (with its subfolders) and the EXIF date taken (``taken_after <= taken < taken_before``, ISO dates)."""
    return {"folder": folder or None, "taken_after": taken_after, "taken_before": taken_before}


def _form_filters(
    folder: str | None = Form(None, max_length=500),
    taken_after: str | None = Form(None, max_length=40),
    taken_before: str | None = Form(None, max_length=40),
) -> dict[str, Any]:
    """:func:`_query_filters` as form fields (``/api/arithmetic`` is a form, for its upload)."""
    return {"folder": folder or None, "taken_after": taken_after, "taken_before": taken_before}


def _add_search_routes(
    app: FastAPI, current: Callable[[], Index], settings: ServeSettings, workers: _Workers
) -> None:
    K = Query(10, ge=1, le=settings.max_k)

    def decode(data: bytes) -> Image.Image:
        return decode_upload(data, settings.max_upload_bytes, settings.max_pixels)

    @app.get("/api/search")
    async def search(
        q: str = Query(..., min_length=1, max_length=MAX_QUERY),
        k: int = K,
        rerank: int = Query(0, ge=0, le=settings.rerank_max),
        filters: dict[str, Any] = Depends(_query_filters),
    ) -> dict[str, Any]:
        """The ``k`` best photos for sentence ``q`` (both routes fused where the index has concepts,
        :mod:`vsekit.retrieval.answer`; each hit says which ``route`` found it and its ``label``);
        ``rerank=N`` re-orders the top N by the ``vse+aligner`` fusion; filters: ``folder`` (with its
        subfolders) and the EXIF date taken (``taken_after <= taken < taken_before``, ISO dates).
        ``weak``: no photo matches well (neither route finds the query's subject; false for a model with
        no calibration); ``warning``: the query does not read as English; ``notice``: a route that is off."""
        index = current()

        def answer() -> dict[str, Any]:
            found = index.answer(q, k=k, rerank=rerank, **filters)
            extra = {key: value for key, value in found.to_json().items() if value is not None}
            return {**_results(found.hits, index), **extra, "weak": bool(found.weak)}

        # the re-rank computes regions with the aligner: a worker thread, like the other slow work
        return await workers.run("photo", answer) if rerank else answer()

    KEEP = Query(False, description="keep the photo searched by and its exact copies (left out by default)")

    @app.post("/api/search/image")
    async def search_image(
        file: UploadFile = File(...),
        k: int = K,
        keep_query: bool = KEEP,
        filters: dict[str, Any] = Depends(_query_filters),
    ) -> dict[str, Any]:
        """The ``k`` photos most like an uploaded one (an indexed photo with the upload's bytes left out:
        ``keep_query=true`` keeps it); the filters as for ``/api/search``."""
        data, index = await _upload_bytes(file, settings), current()
        sha256 = hashlib.sha256(data).hexdigest()

        def answer() -> dict[str, Any]:
            found = index.answer(
                image=decode(data), image_sha256=sha256, keep_query=keep_query, k=k, **filters
            )
            return _answered(found, index)

        return await workers.run("upload", answer)

    @app.get("/api/similar/{photo_id}")
    def similar(
        photo_id: int,
        k: int = K,
        keep_query: bool = KEEP,
        filters: dict[str, Any] = Depends(_query_filters),
    ) -> dict[str, Any]:
        """More like indexed photo ``photo_id``: the photo itself and its exact copies are left out
        (``keep_query=true`` keeps them); ``photo`` names it. The filters as for ``/api/search``."""
        index = current()
        _photo_path(index, photo_id)
        found = index.answer(like=photo_id, keep_query=keep_query, k=k, **filters)
        photo = {"id": photo_id, "path": _printable(index.paths[photo_id])}
        return {**_answered(found, index), "photo": photo}

    @app.post("/api/arithmetic")
    async def arithmetic(
        q: str | None = Form(None, max_length=MAX_QUERY),
        photo_id: int | None = Form(None, alias="id"),
        minus: str | None = Form(None, max_length=1000),
        plus: str | None = Form(None, max_length=1000),
        weight: float | None = Form(None, gt=0, le=100),
        k: int = Form(10, ge=1, le=settings.max_k),
        resort: int = Form(0, ge=0, le=settings.max_k),
        file: UploadFile | None = File(None),
        keep_query: bool = Form(False),
        filters: dict[str, Any] = Depends(_form_filters),
    ) -> dict[str, Any]:
        """Kiros et al. 2014, Eq. 15: (query + weight x (plus words - minus words)), normalised, by cosine
        (``weight``: default the model's shipped rule, which ``arithmetic`` in the answer gives); a photo
        query leaves the photo and its exact copies out, as ``/api/similar`` does (``keep_query``); the
        filters as for ``/api/search``."""
        data = await _upload_bytes(file, settings) if file is not None and file.filename else None
        index = current()
        options = {"minus": _words(minus), "plus": _words(plus), "k": k, "resort": resort}
        if weight is not None:
            options["weight"] = weight
        options |= filters

        def answer() -> dict[str, Any]:
            image = decode(data) if data is not None else None
            if photo_id is not None:
                _photo_path(index, photo_id)
            text = q if q and q.strip() else None
            if sum(x is not None for x in (text, image, photo_id)) != 1:
                raise UploadError("give one query: a sentence 'q', a photo 'file' or an indexed photo 'id'")
            sha256 = hashlib.sha256(data).hexdigest() if data is not None else None
            query = dict(like=photo_id, image_sha256=sha256, keep_query=keep_query)
            return _answered(index.answer(text, image, **query, **options), index)

        return await workers.run("upload", answer)


def _add_photo_routes(
    app: FastAPI,
    current: Callable[[], Index],
    settings: ServeSettings,
    captioner: _Captioner,
    workers: _Workers,
) -> None:
    @app.post("/api/caption")
    async def caption(file: UploadFile = File(...)) -> dict[str, Any]:
        data = await _upload_bytes(file, settings)

        def answer() -> dict[str, Any]:
            image = decode_upload(data, settings.max_upload_bytes, settings.max_pixels)
            return {"captions": captioner.describe(image, settings.captions)}

        return await workers.run("upload", answer)

    @app.get("/api/caption/{photo_id}")
    async def caption_indexed(photo_id: int) -> dict[str, Any]:
        index = current()

        def answer() -> dict[str, Any]:
            image = _open_photo(index, photo_id, settings)
            return {"captions": captioner.describe(image, settings.captions)}

        return await workers.run("photo", answer)

    @app.get("/api/thumb/{photo_id}")
    async def thumb(photo_id: int) -> Response:
        index = current()
        path = _photo_path(index, photo_id)
        data = await workers.run("photo", _photo_jpeg, path, index.paths[photo_id], settings)
        return Response(data, media_type="image/jpeg")


# --- what the page needs beyond the search API: the full-size view, why this photo, near-duplicates ---


def _page_info(index: Index, settings: ServeSettings) -> dict[str, Any]:
    """``/api/info`` fields for the page's header, paging and folder filter: the photo folder's name (not
    a filesystem path), the largest ``k`` a request may ask for, and the folders that hold photos
    (relative to the photo folder, at most 500)."""
    fields = {
        "folder": _printable(index.photos_dir.name),
        "max_k": settings.max_k,
        "folders": [_printable(f) for f in index.folders(limit=500)],
    }
    if settings.rerank_max and index.rerank_available():
        fields["rerank_max"] = settings.rerank_max
    return fields


def _add_page_routes(
    app: FastAPI, current: Callable[[], Index], settings: ServeSettings, workers: _Workers
) -> None:
    """The page's routes; ``current()`` is the index a request answers from."""

    @app.get("/api/photo/{photo_id}")
    async def photo(photo_id: int) -> Response:
        """The indexed photo upright, as a JPEG of at most ``photo_side`` pixels on its long side."""
        index = current()
        path = _photo_path(index, photo_id)
        data = await workers.run("photo", _photo_jpeg, path, index.paths[photo_id], settings, True)
        # no caching header: ids are rows, and a live index may give an id another photo after an update
        return Response(data, media_type="image/jpeg")

    @app.get("/api/explain/{photo_id}")
    async def explain(
        photo_id: int, q: str = Query(..., min_length=1, max_length=MAX_QUERY)
    ) -> dict[str, Any]:
        """Why this photo matches ``q`` (:meth:`vsekit.Index.explain`): ``{"width", "height", "words":
        [{"word", "box", "score"}], "segments": [{"text", "box", "score"}]}``, boxes ``[x0, y0, x1, y1]``
        in pixels of the upright photo (Karpathy & Fei-Fei 2015, Eq. 8 and 10-12); with ``"concept":
        {"label", "box", "probability"}`` when the concept route matched it through an ImageNet class (the
        box from the class activation map, Zhou et al. 2016)."""
        index = current()
        _photo_path(index, photo_id)

        def answer() -> dict[str, Any]:
            found = index.explain(photo_id, q)
            return {**found, "path": _printable(found["path"])}

        return await workers.run("photo", answer)

    @app.get("/api/duplicates")
    def duplicates(threshold: float = Query(DEFAULT_THRESHOLD, ge=-1.0, le=1.0)) -> dict[str, Any]:
        """Exact copies and near-duplicate groups, largest first (:func:`find_duplicates`): ``{"folder"
        (its name), "exact": [group, ...], "near": [...]}``, a group ``{"kind", "score", "keeper",
        "photos": [{"id", "path", "bytes", "width", "height", "taken", "copies": [{"id", "path"}]}]}``,
        the keeper first."""
        index = current()
        paths = list(index.paths)
        row = {path: i for i, path in enumerate(paths)}
        exact, near = find_duplicates(index.vectors, paths, index.records(), index.photos_dir, threshold)

        def photo(p: Any) -> dict[str, Any]:
            copies = [{"id": row[c], "path": _printable(c)} for c in p.copies]
            return {**p.to_dict(), "id": row[p.path], "path": _printable(p.path), "copies": copies}

        def group(g: Any) -> dict[str, Any]:
            return {
                **g.to_dict(),
                "keeper": _printable(g.keeper.path),
                "photos": [photo(p) for p in g.photos],
            }

        folder = _printable(index.photos_dir.name)  # the folder's name only, as /api/info: no absolute paths
        return {"folder": folder, "exact": [group(g) for g in exact], "near": [group(g) for g in near]}


# --- browsing every photo by date, and the original files ---

#: What an original is served as, by its suffix (anything else is a download of bytes, never a page).
_IMAGE_TYPES = {
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".png": "image/png",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".heic": "image/heic",
    ".heif": "image/heif",
    ".avif": "image/avif",
}


def _browse_page(index: Index, offset: int, limit: int) -> dict[str, Any]:
    """``/api/photos``: a page of the index's photos, newest date taken first (:meth:`Index.by_date`)."""
    photos = []
    for photo in index.by_date(offset, limit):
        item = {"id": photo["id"], "path": _printable(photo["path"]), "taken": photo["taken"]}
        if photo["caption"]:
            item["caption"] = photo["caption"]
        photos.append(item)
    return {"total": len(index), "offset": offset, "photos": photos}


def _original(index: Index, photo_id: int, download: bool) -> FileResponse:
    """Row ``photo_id``'s file as it is on disk, inline or as an attachment named as the file is."""
    path = _photo_path(index, photo_id)
    try:
        st = path.stat()
    except OSError:
        raise HTTPException(
            404, f"photo {index.paths[photo_id]} can no longer be read (file not found)"
        ) from None
    kind = _IMAGE_TYPES.get(path.suffix.lower(), "application/octet-stream")
    headers = {
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        "Cache-Control": "no-store",
    }
    logger.debug("original %d (%s, %d bytes, download=%s)", photo_id, kind, st.st_size, download)
    return FileResponse(
        path,
        media_type=kind,
        headers=headers,
        filename=_printable(PurePosixPath(index.paths[photo_id]).name),
        stat_result=st,
        content_disposition_type="attachment" if download else "inline",
    )


def _add_browse_routes(app: FastAPI, current: Callable[[], Index], settings: ServeSettings) -> None:
    """The browse view's page of photos and the original files (read-only; photos by row id only)."""

    @app.get("/api/photos")
    def photos(
        offset: int = Query(0, ge=0), limit: int = Query(60, ge=1, le=settings.browse_max)
    ) -> dict[str, Any]:
        """Every photo of the index, a page at a time: ``{"total", "offset", "photos": [{"id", "path",
        "taken", "caption"?}]}``, newest EXIF date taken first, photos without a date last by path."""
        return _browse_page(current(), offset, limit)

    @app.get("/api/original/{photo_id}")
    def original(photo_id: int, download: bool = Query(False)) -> FileResponse:
        """The indexed photo's original file, byte for byte (a HEIC stays HEIC): shown in the browser, or
        with ``download=true`` saved under its file name (``Content-Disposition: attachment``)."""
        return _original(current(), photo_id, download)


def uvicorn_config(app: FastAPI, host: str, port: int, settings: ServeSettings | None = None) -> Any:
    """The uvicorn configuration ``vsekit serve`` runs ``app`` with (h11, with the request-head deadline)."""
    import uvicorn

    settings = settings or app.state.settings
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        http=header_deadline_protocol(settings.header_timeout_s),
    )


def bind(host: str, port: int) -> Any:
    """A listening socket on ``host:port``, or a :class:`VsekitError` saying why not (a busy port)."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise VsekitError(f"cannot listen on {host}:{port} (unknown address: {exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT, not a busy one
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = "the port is in use" if exc.errno == 98 else (exc.strerror or type(exc).__name__)
        raise VsekitError(f"cannot listen on {host}:{port} ({reason})") from None
    sock.set_inheritable(True)
    return sock


def warm_up(index: Index) -> None:
    """Load what a search needs (the joint model, which a photo query needs; the ONNX graph of its text
    side, which the sentences go through, exported if this machine has none yet; the concept route's class
    vectors; the ANN structures) by answering one query, as a request would. A failure is logged and left
    to the queries, which report it as before (a changed model file, say: its rebuild hint is on the
    page)."""
    started = time.perf_counter()
    try:
        _ = index.model
        index.prepare_text_graph()
        index.answer("a photo", k=1)
    except VsekitError as exc:
        logger.warning("the models did not load before serving: %s", exc)
        return
    logger.info("models loaded in %.1f s", time.perf_counter() - started)


def run(
    index_path: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    allow_hosts: tuple[str, ...] = (),
    ready: Callable[[str], None] | None = None,
    warming: Callable[[], None] | None = None,
) -> None:
    """Serve the index at ``index_path`` with uvicorn (loopback only unless ``host`` says otherwise).

    The index is opened and the port bound first, so a missing index or a busy port is an error before
    anything says "serving"; then (``warming`` called first) the models load (:func:`warm_up`), so the
    first query answers as fast as any other; then ``ready`` gets the URL."""
    index = Index.open(index_path)
    sock = bind(host, port)
    url_host = f"[{host}]" if ":" in host else host
    url = f"http://{url_host}:{sock.getsockname()[1]}"
    if warming is not None:
        warming()
    warm_up(index)
    logger.info("serving %s (%d photos) on %s", index_path, len(index), url)
    if ready is not None:
        ready(url)
    import uvicorn

    settings = ServeSettings(host=host, allow_hosts=tuple(allow_hosts))
    try:
        uvicorn.Server(uvicorn_config(create_app(index, settings), host, port, settings)).run(sockets=[sock])
    finally:
        sock.close()
