"""`vsekit index build|update|info` and `vsekit search`: a folder of photos, searched by text, photo or
arithmetic (Kiros et al. 2014, Eq. 15)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from vsekit.cli._common import (
    CNN_ENGINE_HELP,
    DEVICE_HELP,
    console,
    err_console,
    set_cnn_engine,
    user_errors,
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
from vsekit.errors import VsekitError
from vsekit.retrieval.index import BuildReport, Index, SearchHit
from vsekit.retrieval.search import ENGINES
from vsekit.retrieval.shards import ShardedIndex

index_app = typer.Typer(no_args_is_help=True, help="Index a folder of photos (no captions needed).")

ENGINE_HELP = f"Search engine: {', '.join(ENGINES)} (auto: exact below 50,000 photos, else HNSW)."


def _print_report(index: Index, report: BuildReport) -> None:
    for error in report.failed.values():
        err_console.print(f"[yellow]skipped:[/] {error}", highlight=False, soft_wrap=True)
    console.print(
        f"{index.path}: {len(index)} photos indexed ({len(report.added)} added, {len(report.changed)} "
        f"changed, {len(report.removed)} removed, {report.unchanged} unchanged, {len(report.failed)} "
        "unreadable)"
    )


@index_app.command("build")
def build(
    photos: Path = typer.Argument(..., help="Folder of photos (searched recursively)."),
    out: Path = typer.Option(..., "--out", help="Index directory (created; an existing one is updated)."),
    model: str = typer.Option(
        None,
        "--model",
        help="Joint model: a shipped name (vse; bow for arithmetic-heavy use) or a model file.",
    ),
    dtype: str = typer.Option(None, "--dtype", help="Stored vectors: float32 (default) or float16."),
    engine: str = typer.Option(None, "--engine", help=ENGINE_HELP),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    cnn_engine: str | None = typer.Option(None, "--cnn-engine", help=CNN_ENGINE_HELP),
    distributed: str | None = DISTRIBUTED,
    ray_address: str | None = RAY_ADDRESS,
    ray_workers: int | None = RAY_WORKERS,
    ray_threads: int = RAY_THREADS,
    ray_retries: int = RAY_RETRIES,
) -> None:
    """Embed every photo under PHOTOS into an index (re-running adds, re-embeds and drops what changed).

    With --distributed ray, chunks of photos are embedded by a Ray actor pool; the index is the same."""
    with user_errors(interrupted="re-run the same command to resume"):
        set_cnn_engine(cnn_engine)
        options = ray_options(distributed, ray_address, ray_workers, ray_threads, ray_retries)
        if options is not None:
            from vsekit.distributed.index import ray_build_index

            index = ray_build_index(
                photos, out, model, options=options, dtype=dtype, engine=engine, device=device
            )
        else:
            index = Index.build(photos, out, model, dtype=dtype, engine=engine, device=device)
        _print_report(index, index.report)


@index_app.command("update")
def update(index: Path = typer.Argument(..., help="Index directory.")) -> None:
    """Bring an index up to date with its photo folder (new, changed and deleted files)."""
    with user_errors(interrupted="re-run the same command to resume"):
        opened = Index.open(index)
        _print_report(opened, opened.update())


@index_app.command("compact")
def compact(index: Path = typer.Argument(..., help="Index directory.")) -> None:
    """Merge an index's segments into one and drop deleted photos' vectors (also done by itself)."""
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


@index_app.command("info")
def info(index: Path = typer.Argument(..., help="Index directory.")) -> None:
    """What an index holds: photo folder, count, unreadable files, model, storage."""
    with user_errors():
        details = Index.open(index).info()
        for key, value in details.items():
            if key != "failed":
                console.print(f"{key:>12}: {value}", highlight=False)
        console.print(f"{'unreadable':>12}: {len(details['failed'])}")
        for image_id, error in details["failed"].items():
            console.print(f"{'':>14}{image_id}: {error}", highlight=False)


def _rows(query: str, hits: list[SearchHit]) -> dict:
    return {"query": query, "results": [{"path": h.path, "score": round(h.score, 6)} for h in hits]}


def _print_hits(title: str, hits: list[SearchHit]) -> None:
    console.print(Text(title, style="bold"), soft_wrap=True)  # Text: a query's [brackets] are no markup
    table = Table(header_style="bold")
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("photo")
    for rank, hit in enumerate(hits, 1):
        table.add_row(str(rank), f"{hit.score:.3f}", hit.path)
    console.print(table if hits else "no photo scores above the threshold")


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
    text: str = typer.Argument(None, help="A sentence, e.g. 'a dog catching a frisbee'."),
    image: Path = typer.Option(None, "--image", help="Search by a photo (it may be outside the index)."),
    queries: Path = typer.Option(None, "--queries", help="A file of sentences, one per line (JSONL out)."),
    top: int = typer.Option(10, "--top", min=1, help="Results per query."),
    json_out: Path = typer.Option(None, "--json", help="Write results as JSON lines here."),
    min_score: float = typer.Option(None, "--min-score", help="Drop results with a lower cosine."),
    minus: list[str] = typer.Option([], "--minus", help="Subtract this word's embedding (repeatable)."),
    plus: list[str] = typer.Option([], "--plus", help="Add this word's embedding (repeatable)."),
    resort: int = typer.Option(0, "--resort", help="Re-sort the top N by distance to their mean (Kiros)."),
    engine: str = typer.Option(None, "--engine", help=ENGINE_HELP),
    folder: str = typer.Option(None, "--folder", help="Only photos in this folder of the index (and below)."),
    shard: list[Path] = typer.Option(
        [], "--shard", help="Another index directory searched with INDEX as one (merged top k; repeatable)."
    ),
) -> None:
    """Search an index by a sentence, a photo (--image) or many sentences (--queries), with optional
    vector arithmetic: query - minus + plus, normalised (Kiros et al. 2014, Eq. 15)."""
    with user_errors():
        if sum(x is not None for x in (text, image, queries)) != 1:
            raise VsekitError("give one of: a sentence, --image PHOTO or --queries FILE")
        opened = ShardedIndex.open([index, *shard]) if shard else Index.open(index)
        if folder is not None and (shard or queries is not None):
            raise VsekitError("--folder applies to one index and one sentence or --image")
        where = {} if folder is None else {"folder": folder}
        if queries is not None:
            if plus or minus:
                raise VsekitError("--plus/--minus apply to one sentence or --image, not to --queries")
            texts = _read_queries(queries)
            results = opened.search_texts(texts, k=top, min_score=min_score, engine=engine)
            rows = [_rows(q, hits) for q, hits in zip(texts, results, strict=True)]
        else:
            if image is not None and not image.is_file():
                raise VsekitError(f"{image}: photo not found")
            hits = opened.search(
                text,
                image,
                plus=plus,
                minus=minus,
                k=top,
                min_score=min_score,
                resort=resort,
                engine=engine,
                **where,
            )
            rows = [_rows(text if text is not None else str(image), hits)]
        if json_out is not None:
            write_jsonl(json_out, rows)
            console.print(f"wrote {len(rows)} result line(s) to {json_out}")
        elif queries is not None:  # JSON lines on stdout, as --json would write them
            for row in rows:
                console.print(json.dumps(row), highlight=False, soft_wrap=True, markup=False)
        else:
            arithmetic = "".join([f" - {w!r}" for w in minus] + [f" + {w!r}" for w in plus])
            _print_hits(f"{rows[0]['query']}{arithmetic}", hits)
