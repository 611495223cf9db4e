"""`vsekit index build|update|info` and `vsekit search`: a folder of photos, searched by text, photo or
arithmetic (Kiros et al. 2014, Eq. 15)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from vsekit.cli._common import (
    CNN_ENGINE_HELP,
    DEVICE_HELP,
    console,
    err_console,
    plain,
    set_cnn_engine,
    show_progress,
    user_errors,
    verbose,
    warn,
    write_jsonl,
)
from vsekit.cli._distributed import (
    DISTRIBUTED,
    RAY_ADDRESS,
    RAY_RETRIES,
    RAY_THREADS,
    RAY_WORKERS,
    ray_options,
)
from vsekit.errors import VsekitError, command, printable

if TYPE_CHECKING:  # the library (torch, the models) is imported inside the commands: --help stays fast
    from vsekit.collection import Index as CollectionIndex
    from vsekit.retrieval.answer import Answer
    from vsekit.retrieval.arithmetic import ArithmeticRule
    from vsekit.retrieval.index import BuildReport, Index, SearchHit
    from vsekit.retrieval.photos import PhotoScan
    from vsekit.retrieval.shards import ShardedIndex

index_app = typer.Typer(no_args_is_help=True, help="Index a folder of photos (no captions needed).")

#: vsekit.retrieval.search.ENGINES, written out so that --help needs no torch (a test keeps them equal)
SEARCH_ENGINES = ("auto", "exact", "flat", "hnsw", "ivf", "ivfpq")
ENGINE_HELP = (
    f"Search engine: {', '.join(SEARCH_ENGINES)} (auto: exact below 50,000 photos, else HNSW, or IVF-PQ "
    "past 2 GiB of float32 vectors)."
)


def _scan(photos: Path) -> PhotoScan:
    """The photo folder's scan, before any model loads: a missing folder, a file, or a folder without a
    single photo is one line naming what was found; files left out are reported, each with its reason."""
    from vsekit.retrieval.photos import scan_photos

    scan = scan_photos(photos)
    for image_id, reason in scan.skipped.items():
        warn(f"{printable(image_id)}: {reason}")
    if not scan.photos:
        raise VsekitError(scan.nothing_to_index())
    if scan.not_photos:
        err_console.print(plain(scan.not_photos_summary(), "yellow"), soft_wrap=True)
    return scan


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise VsekitError(f"{printable(str(out))}: --out is a file; give a folder for the index")


#: ``index build`` and ``index update``: list every unreadable file, not only those new since the last run
VERBOSE = typer.Option(
    False,
    "--verbose",
    help="List every unreadable file (by default only those new or changed since the last run).",
)


def _print_report(index: Index, report: BuildReport, every: bool = False) -> None:
    """The unreadable files (each once, in one wording: those found by this run, or with ``every`` all of
    them), then the counts."""
    shown = report.failed if verbose(every) else report.new_failures()
    for error in shown.values():
        warn(error, "unreadable")
    if report.replaced_model is not None:
        new = index.manifest["model"]
        console.print(
            plain(
                f"{index.path}: rebuilt with {new['name']} (sha256 {new['sha256'][:12]}; was "
                f"{report.replaced_model['name']}, sha256 {report.replaced_model['sha256'][:12]}): "
                f"{len(report.reembedded)} photos embedded again"
            ),
            soft_wrap=True,
        )
    console.print(
        plain(
            f"{index.path}: {len(index)} photos indexed ({len(report.added)} added, {len(report.changed)} "
            f"changed, {len(report.removed)} removed, {report.unchanged} unchanged, {len(report.failed)} "
            "unreadable)"
        ),
        soft_wrap=True,
    )
    if len(shown) < len(report.failed):
        before = len(report.failed) - len(shown)
        said = (
            f"{before} unreadable file{'s' if before > 1 else ''} found by an earlier run and unchanged "
            f"since not listed again (--verbose, or {command('index', 'info', index.path)}, lists them)"
        )
        console.print(plain(said, "dim"), soft_wrap=True)


@index_app.command("build")
def build(
    photos: Path = typer.Argument(..., help="Folder of photos (searched recursively)."),
    out: Path = typer.Option(..., "--out", help="Index directory (created; an existing one is updated)."),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Joint model: a shipped name (vse; bow for arithmetic-heavy use) or a model file.",
    ),
    dtype: str | None = typer.Option(None, "--dtype", help="Stored vectors: float32 (default) or float16."),
    engine: str | None = typer.Option(None, "--engine", help=ENGINE_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    cnn_engine: str | None = typer.Option(None, "--cnn-engine", help=CNN_ENGINE_HELP),
    distributed: str | None = DISTRIBUTED,
    ray_address: str | None = RAY_ADDRESS,
    ray_workers: int | None = RAY_WORKERS,
    ray_threads: int = RAY_THREADS,
    ray_retries: int = RAY_RETRIES,
    captions: bool = typer.Option(
        False,
        "--captions",
        help="Also store the shipped captioner's caption of each photo (shown in results).",
    ),
    rebuild: bool = typer.Option(
        False,
        "--rebuild",
        help="An index built with another model (or an older shipped vse) is embedded again with this "
        "one; searches use the old index until the new one is complete.",
    ),
    every_unreadable: bool = VERBOSE,
) -> None:
    """Embed every photo under PHOTOS into an index (re-running adds, re-embeds and drops what changed).

    With --distributed ray, chunks of photos are embedded by a Ray actor pool; the index is the same.
    With --captions, each photo's caption is stored too (resumable; only new and changed photos later).
    After a vsekit upgrade that ships a new model, --rebuild brings an index over to it."""
    with user_errors(interrupted="re-run the same command to resume"):
        scan = _scan(photos)
        _check_out(out)
        if engine is not None and engine not in SEARCH_ENGINES:
            raise VsekitError(f"unknown --engine {engine!r}; choose one of {', '.join(SEARCH_ENGINES)}")
        set_cnn_engine(cnn_engine)
        options = ray_options(distributed, ray_address, ray_workers, ray_threads, ray_retries)
        settings: dict[str, Any] = dict(
            dtype=dtype, engine=engine, device=device, progress=show_progress(), rebuild=rebuild
        )
        settings["photos"] = scan.photos  # the folder is not scanned twice
        if options is not None:
            from vsekit.distributed.index import ray_build_index

            index = ray_build_index(photos, out, model, options=options, **settings)
        else:
            from vsekit.retrieval.index import Index

            index = Index.build(photos, out, model, **settings)
        assert index.report is not None  # build() sets it
        _print_report(index, index.report, every_unreadable)
        index.prepare_text_graph()  # searches then need no torch (once per machine and model: seconds)
        if captions:
            _caption_photos(index.path, device)


@index_app.command("update")
def update(
    index: Path = typer.Argument(..., help="Index directory."),
    captions: bool | None = typer.Option(
        None,
        "--captions/--no-captions",
        help="Caption new and changed photos (default: when the index already stores captions).",
    ),
    watch: bool = typer.Option(
        False,
        "--watch",
        help="Keep watching the photo folder and update the index as files are added, changed or removed "
        "(Ctrl-C stops).",
    ),
    every: float | None = typer.Option(
        None, "--every", help="With --watch: seconds between two looks at the folder (default 5).", min=0.05
    ),
    settle: float | None = typer.Option(
        None,
        "--settle",
        help="With --watch: seconds a new or changed file must stay the same size and time before it is "
        "read (default 2; a file being copied waits).",
        min=0.0,
    ),
    every_unreadable: bool = VERBOSE,
) -> None:
    """Bring an index up to date with its photo folder (new, changed and deleted files).

    With --watch it keeps doing so: one line for each round that changed the index; a running
    `vsekit serve` on the same index follows each round within a second."""
    from vsekit.retrieval.index import Index

    with user_errors(interrupted="re-run the same command to resume"):
        if not watch and (every is not None or settle is not None):
            raise VsekitError("--every and --settle apply with --watch")
        opened = Index.open(index)
        scan = _scan_indexed(opened)
        had_captions = len(opened.uncaptioned()) < len(opened)
        with_captions = captions or (captions is None and had_captions)
        if watch:
            _watch(opened, every, settle, with_captions)
            return
        report = opened.update(progress=show_progress(), photos=scan.photos)  # not scanned twice
        _print_report(opened, report, every_unreadable)
        if with_captions:
            _caption_photos(opened.path, "auto")


def _scan_indexed(index: Index) -> PhotoScan:
    """An index's photo folder scanned before an update: a folder that is gone, or empty (a drive not
    mounted), must not empty the index; its line names the command for photos that moved."""
    from vsekit.retrieval.relocate import moved_hint

    try:
        return _scan(index.photos_dir)
    except VsekitError as exc:
        raise VsekitError(f"{exc}; {moved_hint(index.path)}") from None


@index_app.command("relocate")
def relocate(
    index: Path = typer.Argument(..., help="Index directory."),
    photos: Path = typer.Argument(..., help="The folder that holds the index's photos now."),
    check_all: bool = typer.Option(
        False,
        "--check-all",
        help="Compare every photo's sha256 (default: every photo's size and the sha256 of a sample).",
    ),
) -> None:
    """Point an index at its photo folder's new place (moved, renamed or mounted elsewhere).

    It first checks that the folder holds the index's photos (each one's size, and the sha256 of a sample
    or, with --check-all, of every one); no photo is embedded again."""
    from vsekit.retrieval.index import Index

    with user_errors():
        done = Index.open(index).relocate(photos, check_all=check_all)
        if not done.moved:
            console.print(plain(f"{index}: already points at {printable(done.new)}"), soft_wrap=True)
            return
        console.print(
            plain(
                f"{index}: now points at {printable(done.new)} (was {printable(done.old)}); {done.checked} "
                f"photos found with their size, {done.hashed} compared by sha256; no photo embedded again"
            ),
            soft_wrap=True,
        )


def _watch(index: Index, every: float | None, settle: float | None, captions: bool) -> None:
    """``update --watch``: rounds until Ctrl-C (or SIGTERM), which stops between or inside a round (the
    store keeps its last generation; a restart continues) with "stopped" and exit status 0."""
    import signal
    import threading
    import time

    from vsekit.retrieval.watch import DEFAULT_EVERY_S, DEFAULT_SETTLE_S, WatchRound, watch

    every = DEFAULT_EVERY_S if every is None else every
    settle = DEFAULT_SETTLE_S if settle is None else settle

    def report(done: WatchRound) -> None:
        for error in done.unreadable.values():
            warn(error, "unreadable")
        if not done.changed_anything:
            return
        unreadable = f", {len(done.unreadable)} unreadable" if done.unreadable else ""
        console.print(
            plain(
                f"{time.strftime('%H:%M:%S')} {index.path}: {done.count} photos ({len(done.added)} added, "
                f"{len(done.changed)} changed, {len(done.removed)} removed{unreadable})"
            ),
            soft_wrap=True,
        )
        if captions and (done.added or done.changed):
            _caption_photos(index.path, "auto")

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, interrupt) if main else None
    try:
        _ = index.model  # loaded now: the first photo copied in does not also wait for the model
        console.print(
            plain(f"watching {index.photos_dir} every {every:g} s for {index.path} (Ctrl-C stops)"),
            soft_wrap=True,
        )
        if captions:  # photos a stopped run left without a caption
            _caption_photos(index.path, "auto")
        watch(index, every, settle, on_round=report, progress=show_progress())
    except KeyboardInterrupt:
        err_console.print("stopped")
    finally:
        if main:
            signal.signal(signal.SIGTERM, before)


@functools.cache
def _captioner(device: str):  # noqa: ANN202 - the library's captioner, imported in the command
    """The shipped captioner, loaded once (``update --watch`` captions in every round that adds photos)."""
    from vsekit.api import load_captioner

    return load_captioner(device=device)


def _caption_photos(index: Path, device: str) -> None:
    """``--captions``: the shipped captioner's caption for each photo without one, stored a chunk at a
    time (an interrupted run keeps what it finished)."""
    from tqdm.auto import tqdm

    from vsekit.collection import Index

    opened = Index.open(index)
    todo = len(opened.uncaptioned())
    if not todo:
        return
    captioner = _captioner(device)
    bar = tqdm(total=todo, desc="caption photos", unit="photo", disable=not show_progress())

    def step(done: int, total: int) -> None:
        bar.update(done - bar.n)

    with bar:
        failed = opened.caption_photos(captioner, progress=step)
    for photo_id, reason in failed.items():
        warn(f"{printable(photo_id)}: {reason}", "unreadable")
    console.print(plain(f"{index}: {todo - len(failed)} photos captioned"), soft_wrap=True)


@index_app.command("compact")
def compact(index: Path = typer.Argument(..., help="Index directory.")) -> None:
    """Merge an index's segments into one and drop deleted photos' vectors (also done by itself)."""
    from vsekit.retrieval.index import Index

    with user_errors(interrupted="re-run the same command to finish"):
        opened = Index.open(index)
        before = opened.info()
        done = opened.compact()
        after = opened.info()
        what = (
            f"{before['segments']} segments and {before['tombstones']} deleted rows merged into "
            f"{after['segments']}"
            if done
            else "already one segment with nothing deleted"
        )
        console.print(f"{index}: {len(opened)} photos; {what}", highlight=False)


@index_app.command("check")
def check(index: Path = typer.Argument(..., help="Index directory.")) -> None:
    """Read every file of an index whole and check it: the database's pages and records, every segment's
    block checksums, every ANN file. One line per damaged file; exit code 1 when one is damaged.
    (Opening an index checks only sizes and headers; a search checks the blocks it reads.)"""
    from vsekit.retrieval.check import check_index

    with user_errors():
        report = check_index(index)
    for line in report.damaged:
        err_console.print(plain(line), highlight=False, soft_wrap=True)
    size = f"{report.files} files, {report.bytes / 1e6:,.1f} MB"
    if not report.ok:
        summary = f"{index}: {len(report.damaged)} damaged of {size} checked"
        err_console.print(plain(summary), highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    said = report.note or f"{report.photos} photos; {size} checked: no damage"
    console.print(plain(f"{index}: {said}"), highlight=False, soft_wrap=True)


@index_app.command("info")
def info(index: Path = typer.Argument(..., help="Index directory.")) -> None:
    """What an index holds: photo folder, count, unreadable files, model, storage."""
    from vsekit.retrieval.index import Index

    with user_errors():
        details = Index.open(index).info()
        for key, value in details.items():
            if key != "failed":
                console.print(plain(f"{key:>12}: {value}"), highlight=False, soft_wrap=True)
        console.print(f"{'unreadable':>12}: {len(details['failed'])}")
        for error in details["failed"].values():  # each error names its file
            console.print(plain(f"{'':>14}{error}"), highlight=False, soft_wrap=True)


def _rows(query: str, found: Answer, index: Index | ShardedIndex) -> dict:
    """A query's JSON line: its hits (paths through :func:`printable`, valid UTF-8 whatever the file
    names; the routes' scores and label of a fused hit; each hit's stored caption, ``index build
    --captions``, where the index holds one) and the answer's verdicts (``weak``, ``warning``, ...)."""
    hits = found.hits
    # stored captions come from a single index (a ShardedIndex has none)
    captions = index.captions([h.path for h in hits]) if hasattr(index, "captions") else {}
    results = []
    for h in hits:
        result = {"path": printable(h.path), "score": round(h.score, 6)}
        if h.route is not None:
            result |= {"joint": round(h.joint or 0.0, 6), "concept": round(h.concept or 0.0, 6)}
            result |= {"route": h.route, "label": h.label}
        if captions.get(h.path):
            result["caption"] = captions[h.path]
        results.append(result)
    row = {"query": printable(query), "results": results}
    return row | {key: value for key, value in found.to_json().items() if value is not None}


def _arithmetic_words(minus: list[str], plus: list[str], rule: ArithmeticRule | None) -> str:
    """`` - 'cat' + 'dog'`` for the results' title, with the weight and phrase when not Eq. 15's."""
    words = "".join([f" - {w!r}" for w in minus] + [f" + {w!r}" for w in plus])
    if rule is None or not words or (rule.weight == 1 and rule.phrase == "{}"):
        return words
    read = "" if rule.phrase == "{}" else f", each read as {rule.phrase.replace('{}', 'WORD')!r}"
    return f"{words} (words weighted {rule.weight:g}{read})"


def _say_confidence(found: Answer) -> None:
    """Above the results: that nothing matches well, that the query does not read as English, a route
    that is off, and the indexed photos a photo query left out (itself and its exact copies)."""
    if found.warning is not None:
        warn(found.warning, "warning")
    if found.notice is not None:
        warn(found.notice, "note")
    if found.left_out:
        _say_left_out(found.left_out)
    if found.weak and found.hits:
        best = found.best or {}
        score = best.get("joint", max(h.score for h in found.hits))
        concept = f"; best concept score {best['concept']:.3f}" if "concept" in best else ""
        console.print(
            plain(f"no photo matches well (best score {score:.3f}{concept})", "yellow"), soft_wrap=True
        )


def _say_left_out(paths: list[str]) -> None:
    shown = ", ".join(printable(p) for p in paths[:3]) + (
        f" and {len(paths) - 3} more" if len(paths) > 3 else ""
    )
    said = f"left out: {shown} (the bytes of the photo searched by; --keep-query keeps them)"
    console.print(plain(said, "dim"), soft_wrap=True)


def _print_hits(title: str, row: dict, why_empty: str) -> None:
    console.print(plain(title, "bold"), soft_wrap=True)  # a query's [brackets] are no markup
    hits = row["results"]
    table = Table(header_style="bold")
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    # the path is what a user needs: never cut (it folds onto a second line at worst); the rest wraps
    longest = max((len(hit["path"]) for hit in hits), default=5)
    table.add_column("photo", overflow="fold", min_width=min(longest, max(console.width - 24, 20)))
    routes = any("route" in hit for hit in hits)
    if routes:
        table.add_column("found by")
    captions = any("caption" in hit for hit in hits)
    if captions:
        table.add_column("caption")
    for rank, hit in enumerate(hits, 1):  # file names and captions are no markup either
        cells: list[str | Text] = [str(rank), f"{hit['score']:.3f}", plain(hit["path"])]
        cells += [plain(_found_by(hit))] if routes else []
        table.add_row(*cells, *([plain(hit.get("caption", ""))] if captions else []))
    console.print(table if hits else plain(why_empty))


def _absolute_paths(opened: Index | ShardedIndex, hits: list[SearchHit]) -> list[str]:
    """Each hit's photo as an absolute path (a shard's hits are absolute already)."""
    folder = getattr(opened, "photos_dir", None)
    return [printable(str(h.path if folder is None else (folder / h.path).absolute())) for h in hits]


def _found_by(hit: dict) -> str:
    """ "tabby · concept", "joint space", "tabby · both" (see :func:`vsekit.retrieval.answer.answer`)."""
    if hit.get("route") == "joint":
        return "joint space"
    label = f"{hit['label']} · " if hit.get("label") else ""
    return label + ("both routes" if hit.get("route") == "both" else "concept")


def _write_explanations(index: CollectionIndex, text: str, hits: list[SearchHit], folder: Path) -> None:
    """``--explain``: each hit drawn with the aligner's word-to-region segments (Karpathy & Fei-Fei 2015,
    sec. 3.1) and, for a concept match, its class's box (a class activation map, Zhou et al. 2016) as
    ``folder/NN-name.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank, hit in enumerate(hits, 1):
        out = folder / f"{rank:02d}-{Path(hit.path).stem}.png"
        index.explain_picture(hit.id, text, out)
    console.print(plain(f"wrote {len(hits)} explained photo(s) to {folder}"), soft_wrap=True)


def _why_empty(index: Path, size: int, min_score: float | None) -> str:
    if size == 0:
        return f"the index holds no photos; {command('index', 'info', index)} shows what its folder holds"
    return f"no photo scores above --min-score {min_score:g}" if min_score is not None else "no results"


def _query_photo(image: Path) -> tuple[Any, str]:
    """The photo searched by (--image), read like an indexed photo (a regular file, size-limited): the
    picture and the sha256 of its bytes."""
    from vsekit.retrieval.photos import PhotoFile, read_photo

    if not image.exists():
        raise VsekitError(f"{printable(str(image))}: photo not found")
    sha256, picture, error = read_photo(PhotoFile(str(image), image, 0, 0))
    if picture is None:
        raise VsekitError(error)
    return picture, sha256


def _read_queries(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise VsekitError(f"{path}: cannot read queries ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise VsekitError(f"{path}: not UTF-8 text ({exc.reason})") from None
    queries = [line.strip() for line in lines if line.strip()]
    if not queries:
        raise VsekitError(f"{path}: no queries (expected one sentence per line)")
    return queries


def search(
    index: Path = typer.Argument(..., help="Index directory (vsekit index build)."),
    text: str | None = typer.Argument(None, help="A sentence, e.g. 'a dog catching a frisbee'."),
    image: Path | None = typer.Option(
        None, "--image", help="Search by a photo (it may be outside the index)."
    ),
    queries: Path | None = typer.Option(
        None, "--queries", help="A file of sentences, one per line (JSONL out)."
    ),
    top: int = typer.Option(10, "--top", min=1, help="Results per query."),
    json_out: Path | None = typer.Option(None, "--json", help="Write results as JSON lines here."),
    paths: bool = typer.Option(
        False,
        "--paths",
        help="Print only the photos' absolute paths, one a line, best first (for xargs, feh, a script).",
    ),
    min_score: float | None = typer.Option(None, "--min-score", help="Drop results with a lower cosine."),
    minus: list[str] = typer.Option([], "--minus", help="Subtract this word's embedding (repeatable)."),
    plus: list[str] = typer.Option([], "--plus", help="Add this word's embedding (repeatable)."),
    arith_weight: float | None = typer.Option(
        None,
        "--arith-weight",
        help="Weight of the --minus/--plus words against the query (default: the model's shipped rule, "
        "chosen on the validation slice: vse 1.25 with each word read as 'a photo of WORD'; otherwise 1, "
        "Kiros Eq. 15). Higher: more of the plus word, less of the query.",
    ),
    resort: int = typer.Option(0, "--resort", help="Re-sort the top N by distance to their mean (Kiros)."),
    engine: str | None = typer.Option(None, "--engine", help=ENGINE_HELP),
    folder: str | None = typer.Option(
        None,
        "--folder",
        help="Only photos in this folder of the index (and below): relative to the photo folder, or an "
        "absolute path inside it.",
    ),
    taken_after: str | None = typer.Option(
        None, "--taken-after", help="Only photos taken on or after this date (YYYY-MM-DD, EXIF date taken)."
    ),
    taken_before: str | None = typer.Option(
        None, "--taken-before", help="Only photos taken before this date."
    ),
    rerank: int = typer.Option(
        0,
        "--rerank",
        min=0,
        help="Re-rank the top N by the vse+aligner fusion (how the sentence's words align with regions).",
    ),
    explain: Path | None = typer.Option(
        None,
        "--explain",
        help="Write each hit drawn with its word-to-region and concept boxes into this folder (PNG).",
    ),
    joint_only: bool = typer.Option(
        False,
        "--joint-only",
        help="Search the joint space alone: cosine scores, the ranking `vsekit eval` measures (default: "
        "fused with the concept route, which knows 1,000 everyday objects).",
    ),
    shard: list[Path] = typer.Option(
        [], "--shard", help="Another index directory searched with INDEX as one (merged top k; repeatable)."
    ),
    keep_query: bool = typer.Option(
        False,
        "--keep-query",
        help="With --image: keep the photo searched by, and its exact copies, in the results (left out by "
        "default).",
    ),
) -> None:
    """Search an index by a sentence, a photo (--image) or many sentences (--queries), with optional
    vector arithmetic: query + weight x (plus - minus), normalised (Kiros et al. 2014, Eq. 15 at weight 1;
    the default weight is the model's shipped rule, --arith-weight another)."""
    from vsekit.collection import Index
    from vsekit.retrieval.answer import joint_answer, shards_answer
    from vsekit.retrieval.shards import ShardedIndex

    with user_errors():
        if sum(x is not None for x in (text, image, queries)) != 1:
            raise VsekitError("give one of: a sentence, --image PHOTO or --queries FILE")
        if keep_query and image is None:
            raise VsekitError("--keep-query applies to --image PHOTO")
        if engine is not None and engine not in SEARCH_ENGINES:
            raise VsekitError(f"unknown --engine {engine!r}; choose one of {', '.join(SEARCH_ENGINES)}")
        where = {
            key: value
            for key, value in (
                ("folder", folder),
                ("taken_after", taken_after),
                ("taken_before", taken_before),
            )
            if value is not None
        }
        if (where or rerank or explain) and (shard or queries is not None):
            raise VsekitError(
                "--folder, --taken-after/--taken-before, --rerank and --explain apply to one index "
                "and one query"
            )
        if (rerank or explain) and (text is None or plus or minus):
            raise VsekitError("--rerank and --explain apply to a sentence without --plus/--minus")
        if arith_weight is not None and not plus and not minus:
            raise VsekitError("--arith-weight applies with --plus/--minus")
        if explain is not None:
            _check_out(explain)
        opened = ShardedIndex.open([index, *shard]) if shard else Index.open(index)
        if queries is not None:
            if plus or minus:
                raise VsekitError("--plus/--minus apply to one sentence or --image, not to --queries")
            texts = _read_queries(queries)
            if isinstance(opened, Index):  # one answer per sentence, as a single search gives it
                options: dict[str, Any] = dict(
                    k=top, min_score=min_score, engine=engine, joint_only=joint_only
                )
                found = [opened.answer(q, **options) for q in texts]
            else:
                results = opened.search_texts(texts, k=top, min_score=min_score, engine=engine)
                found = [joint_answer(opened, q, hits) for q, hits in zip(texts, results, strict=True)]
            rows = [_rows(q, f, opened) for q, f in zip(texts, found, strict=True)]
        else:
            picture, sha256 = _query_photo(image) if image is not None else (None, None)
            options = dict(plus=plus, minus=minus, k=top, min_score=min_score, resort=resort, engine=engine)
            options |= dict(image_sha256=sha256, keep_query=keep_query)
            if arith_weight is not None:
                options["weight"] = arith_weight
            if isinstance(opened, Index):
                answer = opened.answer(
                    text, picture, rerank=rerank, joint_only=joint_only, **options, **where
                )
            else:
                answer = shards_answer(opened, text, picture, **options)
            hits: list[SearchHit] = answer.hits
            rows = [_rows(text if text is not None else str(image), answer, opened)]
        if paths:  # nothing but the paths on stdout: a pipe gets exactly the photos
            for line in _absolute_paths(opened, [h for f in found for h in f.hits] if queries else hits):
                typer.echo(line)
        elif json_out is not None:
            write_jsonl(json_out, rows)
            console.print(plain(f"wrote {len(rows)} result line(s) to {json_out}"), soft_wrap=True)
        elif queries is not None:  # JSON lines on stdout, as --json would write them
            for row in rows:
                console.print(json.dumps(row), highlight=False, soft_wrap=True, markup=False)
        else:
            arithmetic = _arithmetic_words(minus, plus, answer.arithmetic)
            _say_confidence(answer)
            reranked = f" (top {rerank} re-ranked by the fusion; scores are fused)" if rerank else ""
            why_empty = _why_empty(index, len(opened), min_score)
            _print_hits(f"{rows[0]['query']}{arithmetic}{reranked}", rows[0], why_empty)
        if explain is not None:
            assert isinstance(opened, Index) and text is not None  # --explain: one index, one sentence
            _write_explanations(opened, text, hits, explain)
