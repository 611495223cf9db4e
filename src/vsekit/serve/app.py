"""The FastAPI app: one static page and a JSON API over a photo :class:`~vsekit.api.Index`.

``GET /`` the page; ``GET /api/search?q=&k=``; ``POST /api/search/image`` (multipart ``file``, query
``k``); ``POST /api/arithmetic`` (form: ``q`` or ``file`` or ``id``, ``minus``, ``plus``, ``k``,
``resort``); ``GET /api/similar/{id}``; ``POST /api/caption`` (multipart ``file``); ``GET
/api/caption/{id}``; ``GET /api/thumb/{id}``; ``GET /api/info``; for the page: ``GET /api/photo/{id}`` (the
full-size view), ``GET /api/explain/{id}?q=`` (why this photo), ``GET /api/duplicates?threshold=``.
Results are ``{"results": [{"id", "path", "score"}]}``; every error is ``{"error": message}`` with a 4xx
status.

Safety: photos are addressed by row id only (never by a path from the request), uploads are bounded in
bytes (413), in time (a body that trickles in past ``body_timeout_s`` is a 408) and in pixels and are
sniffed by content, queries are bounded in length, nothing from a request is unpickled, and the model
and the captioner are each used by one request at a time (a lock).
"""

from __future__ import annotations

import functools
import io
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from fastapi import FastAPI, File, Form, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from PIL import Image
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from vsekit.api import Index, SearchHit, load_captioner
from vsekit.errors import ImageError, VsekitError
from vsekit.retrieval.duplicates import DEFAULT_THRESHOLD, duplicate_groups
from vsekit.serve.timeouts import BodyDeadline
from vsekit.serve.uploads import UploadError, decode_upload
from vsekit.vision.preprocess import load_image

__all__ = ["ServeSettings", "create_app", "run"]

logger = logging.getLogger(__name__)

MAX_QUERY = 1000
MAX_WORDS = 8


@dataclass(frozen=True)
class ServeSettings:
    """Limits: upload bytes (20 MB), decoded pixels (40 megapixels), results per request, thumbnail side,
    seconds a request body may take to arrive (60: 20 MB at 2.7 Mbit/s; a slower body is a 408)."""

    max_upload_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 40_000_000
    max_k: int = 100
    thumb_side: int = 256
    captions: int = 3
    body_timeout_s: float = 60.0
    photo_side: int = 2048  # the page's full-size view (GET /api/photo/{id}): long side in pixels


class _Captioner:
    """The shipped captioner, loaded on first use and used by one request at a time."""

    def __init__(self, factory: Any = None) -> None:
        self._factory = factory or load_captioner
        self._captioner = None
        self._lock = threading.Lock()

    def describe(self, image: Image.Image | Path, n: int) -> list[str]:
        with self._lock:
            if self._captioner is None:
                self._captioner = self._factory()
            return self._captioner.describe([image], n=n)[0]


def _results(hits: list[SearchHit]) -> dict[str, Any]:
    return {"results": [{"id": h.id, "path": h.path, "score": round(h.score, 6)} for h in hits]}


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


async def _read_upload(file: UploadFile, settings: ServeSettings) -> Image.Image:
    data = await file.read(settings.max_upload_bytes + 1)
    return decode_upload(data, settings.max_upload_bytes, settings.max_pixels)


def _install_errors(app: FastAPI) -> None:
    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

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

    @app.middleware("http")
    async def _limit_body(request: Request, call_next: Any) -> Response:
        length = request.headers.get("content-length")
        limit = app.state.settings.max_upload_bytes + 64 * 1024  # room for the multipart envelope
        if length is not None and not (length.isascii() and length.isdigit()):
            return error(400, f"bad Content-Length header {length[:40]!r}: not a number of bytes")
        if length is not None and int(length) > limit:
            return error(413, f"request body over {app.state.settings.max_upload_bytes} bytes")
        return await call_next(request)


def create_app(index: Index, settings: ServeSettings | None = None, captioner_factory: Any = None) -> FastAPI:
    """The app over ``index`` (``captioner_factory``: what makes the captioner; default the shipped one)."""
    settings = settings or ServeSettings()
    app = FastAPI(title="vsekit photo search", description="Search photos by text, photo or arithmetic.")
    app.state.settings = settings
    _install_errors(app)
    _follow_updates(app, index)
    app.add_middleware(BodyDeadline, seconds=settings.body_timeout_s)  # outermost: bounds every body read

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> str:
        return resources.files("vsekit.serve").joinpath("static/index.html").read_text(encoding="utf-8")

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        details = index.info()
        fields = {"count": details["count"], "model": details["model"], "engine": details["engine"]}
        return {**fields, **_page_info(index, settings)}

    _add_search_routes(app, index, settings)
    _add_photo_routes(app, index, settings, _Captioner(captioner_factory))
    _add_page_routes(app, lambda: index, settings)
    return app


def _follow_updates(app: FastAPI, index: Index) -> None:
    """Between requests, move to the index's newest committed generation (checked at most once a
    second; a finished `vsekit index update` is served without a restart). Off the event loop: a new
    segment's checksum is read once."""

    @app.middleware("http")
    async def _refresh(request: Request, call_next: Any) -> Response:
        try:
            await run_in_threadpool(index.maybe_refresh)
        except VsekitError as exc:  # a damaged new generation: keep serving the one held
            logger.warning("%s", exc)
        return await call_next(request)


def _add_search_routes(app: FastAPI, index: Index, settings: ServeSettings) -> None:
    K = Query(10, ge=1, le=settings.max_k)

    @app.get("/api/search")
    def search(q: str = Query(..., min_length=1, max_length=MAX_QUERY), k: int = K) -> dict[str, Any]:
        return _results(index.search(q, k=k))

    @app.post("/api/search/image")
    async def search_image(file: UploadFile = File(...), k: int = K) -> dict[str, Any]:
        image = await _read_upload(file, settings)
        return _results(index.search(image=image, k=k))

    @app.get("/api/similar/{photo_id}")
    def similar(photo_id: int, k: int = K) -> dict[str, Any]:
        _photo_path(index, photo_id)
        return _results(index.search(vector=index.vectors[photo_id], k=k))

    @app.post("/api/arithmetic")
    async def arithmetic(
        q: str | None = Form(None, max_length=MAX_QUERY),
        photo_id: int | None = Form(None, alias="id"),
        minus: str | None = Form(None, max_length=1000),
        plus: str | None = Form(None, max_length=1000),
        k: int = Form(10, ge=1, le=settings.max_k),
        resort: int = Form(0, ge=0, le=settings.max_k),
        file: UploadFile | None = File(None),
    ) -> dict[str, Any]:
        """Kiros et al. 2014, Eq. 15: (query - minus words + plus words), normalised, by cosine."""
        image = await _read_upload(file, settings) if file is not None and file.filename else None
        vector = None
        if photo_id is not None:
            _photo_path(index, photo_id)
            vector = index.vectors[photo_id]
        q = q if q and q.strip() else None
        if sum(x is not None for x in (q, image, vector)) != 1:
            raise UploadError("give one query: a sentence 'q', a photo 'file' or an indexed photo 'id'")
        words = {"minus": _words(minus), "plus": _words(plus)}
        return _results(index.search(q, image, vector=vector, k=k, resort=resort, **words))


def _add_photo_routes(app: FastAPI, index: Index, settings: ServeSettings, captioner: _Captioner) -> None:
    @app.post("/api/caption")
    async def caption(file: UploadFile = File(...)) -> dict[str, Any]:
        image = await _read_upload(file, settings)
        return {"captions": captioner.describe(image, settings.captions)}

    @app.get("/api/caption/{photo_id}")
    def caption_indexed(photo_id: int) -> dict[str, Any]:
        return {"captions": captioner.describe(_photo_path(index, photo_id), settings.captions)}

    @app.get("/api/thumb/{photo_id}")
    def thumb(photo_id: int) -> Response:
        data = _thumbnail(_photo_path(index, photo_id), settings.thumb_side)
        return Response(data, media_type="image/jpeg")


@functools.lru_cache(maxsize=1024)
def _thumbnail(path: Path, side: int) -> bytes:
    try:
        with Image.open(path) as img:
            img.thumbnail((side, side))
            out = io.BytesIO()
            img.convert("RGB").save(out, format="JPEG", quality=85)
            return out.getvalue()
    except (OSError, ValueError, SyntaxError) as exc:
        raise HTTPException(404, f"photo {path.name} can no longer be read ({exc})") from None


# --- The page's read-only additions (page helper): what the static page needs beyond the search API. ---


def _page_info(index: Index, settings: ServeSettings) -> dict[str, Any]:
    """``/api/info`` fields for the page's header, paging and folder filter: the index's and the photo
    folder's names (not a filesystem path), the largest ``k`` a request may ask for, and the folders that
    hold photos (relative to the photo folder, at most 500)."""
    folders = sorted({str(PurePosixPath(p).parent) for p in index.paths} - {"."})
    return {
        "index": index.path.name,
        "folder": index.photos_dir.name,
        "max_k": settings.max_k,
        "folders": folders[:500],
    }


def _add_page_routes(app: FastAPI, current: Callable[[], Index], settings: ServeSettings) -> None:
    """The page's routes; ``current()`` is the index a request answers from."""

    @app.get("/api/photo/{photo_id}")
    def photo(photo_id: int) -> Response:
        """The indexed photo upright, as a JPEG of at most ``photo_side`` pixels on its long side."""
        path = _photo_path(current(), photo_id)
        try:
            stat = path.stat()
        except OSError:
            raise HTTPException(404, f"photo {path.name} can no longer be read (file not found)") from None
        data = _full_size(path, stat.st_mtime_ns, stat.st_size, settings.photo_side)
        # no caching header: ids are rows, and a live index may give an id another photo after an update
        return Response(data, media_type="image/jpeg")

    @app.get("/api/explain/{photo_id}")
    def explain(photo_id: int, q: str = Query(..., min_length=1, max_length=MAX_QUERY)) -> dict[str, Any]:
        """Why this photo matches ``q`` (:meth:`vsekit.Index.explain`): ``{"width", "height", "words":
        [{"word", "box", "score"}], "segments": [{"text", "box", "score"}]}``, boxes ``[x0, y0, x1, y1]``
        in pixels of the upright photo (Karpathy & Fei-Fei 2015, Eq. 8 and 10-12)."""
        index = current()
        _photo_path(index, photo_id)
        return index.explain(photo_id, q)

    @app.get("/api/duplicates")
    def duplicates(threshold: float = Query(DEFAULT_THRESHOLD, ge=-1.0, le=1.0)) -> dict[str, Any]:
        """Groups of near-duplicate photos, largest first: ``{"groups": [[{"id", "path"}, ...], ...]}``."""
        paths = list((index := current()).paths)
        row = {path: i for i, path in enumerate(paths)}
        groups = duplicate_groups(index.vectors, paths, threshold)
        return {"groups": [[{"id": row[p], "path": p} for p in group] for group in groups]}


@functools.lru_cache(maxsize=32)
def _full_size(path: Path, mtime_ns: int, size: int, side: int) -> bytes:
    """The lightbox's JPEG, decoded by the one decode path (EXIF upright, RGB); keyed by the file's
    modification time and size so a photo changed in place is re-read."""
    try:
        img = load_image(path)
    except ImageError as exc:
        raise HTTPException(404, f"photo {path.name} can no longer be read ({exc})") from None
    img.thumbnail((side, side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=88)
    return out.getvalue()


def run(index_path: str | Path, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve the index at ``index_path`` with uvicorn (loopback only unless ``host`` says otherwise)."""
    import uvicorn

    index = Index.open(index_path)
    logger.info("serving %s (%d photos) on http://%s:%d", index_path, len(index), host, port)
    uvicorn.run(create_app(index), host=host, port=port, log_level="warning")
