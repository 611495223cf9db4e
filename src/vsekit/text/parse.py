"""Dependency parses of captions for the Tree-LSTM (T-LSTM seed, sec. 3.1: "the data were arranged into
dependency trees"), with spaCy instead of the Stanford parser, cached on disk per corpus.

A parse is the list of head indices of a caption's tokens: ``heads[i]`` is the 0-based index of token
``i``'s parent, ``-1`` for the root. The tokens are our own (:func:`vsekit.data.vocab.tokenize`), given to
spaCy as a ready-made ``Doc`` marked as one sentence, so there is exactly one tree node per word the
encoder embeds and exactly one root. Degenerate captions still get a tree: no token at all (``""``,
``"!!!"``, an emoji) parses as one ``<unk>`` node (the encoders read such a caption as one unknown
word), and a (never observed) second root is attached to the first one.

The cache (:func:`cached_parses`) is one JSON-lines file per (spaCy model, model version, caption list),
under ``<cache root>/parses/<model>-<version>/<sha of the captions>.jsonl``: a header line naming spaCy's
and the model's versions, then one line per distinct caption, in order. It is appended a chunk at a time
and flushed, so an interrupted run resumes where it stopped (a torn last line is dropped and redone). A
file whose header names another spaCy or model version is refused: parses of another parser are not
silently mixed with this one's.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from vsekit.data.vocab import tokenize
from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.resources import default_cache_root
from vsekit.text.spacy_nlp import SPACY_MODEL, load_spacy, spacy_identity

__all__ = ["PARSE_FORMAT", "cached_parses", "load_parser", "parse_tokens", "parse_texts", "tree_tokens"]

logger = logging.getLogger(__name__)

PARSE_FORMAT = "vsekit.parses"
_PIPES = ("tok2vec", "parser")
_CHUNK = 1000  # captions parsed between two flushes of the cache file


def load_parser(name: str = SPACY_MODEL) -> Any:
    """spaCy with only ``tok2vec`` and ``parser`` (loaded once per process by :func:`load_spacy`)."""
    return load_spacy(_PIPES, name)


def tree_tokens(text: str) -> list[str]:
    """The words of ``text`` that become tree nodes (the vocabulary's tokenisation; never empty: a text
    without any word is one ``<unk>`` node)."""
    from vsekit.data.vocab import UNK

    return tokenize(text) or [UNK]


def _heads_of(doc: Any) -> list[int]:
    """Head indices of a parsed Doc; a second root (if the parser ever made one) hangs off the first."""
    heads = [-1 if tok.head.i == tok.i else tok.head.i for tok in doc]
    roots = [i for i, h in enumerate(heads) if h < 0]
    for extra in roots[1:]:
        heads[extra] = roots[0]
    return heads


def parse_tokens(
    token_lists: Sequence[Sequence[str]], nlp: Any = None, batch_size: int = 256
) -> list[list[int]]:
    """Head indices of each token list (each list one sentence, at least one token)."""
    from spacy.tokens import Doc

    nlp = nlp or load_parser()
    for k, tokens in enumerate(token_lists):
        if not tokens:
            raise VsekitError(f"token list {k} is empty: a dependency tree needs at least one word")
    docs = (Doc(nlp.vocab, words=list(t), sent_starts=[True, *[False] * (len(t) - 1)]) for t in token_lists)
    return [_heads_of(doc) for doc in nlp.pipe(docs, batch_size=batch_size)]


def parse_texts(texts: Sequence[str], nlp: Any = None) -> list[list[int]]:
    """Head indices of each text's :func:`tree_tokens` (no cache)."""
    return parse_tokens([tree_tokens(t) for t in texts], nlp)


def _cache_path(texts: Sequence[str], ident: dict[str, str], root: Path) -> Path:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    folder = f"{ident['model']}-{ident['model_version']}"
    return root / "parses" / folder / f"{digest.hexdigest()[:16]}.jsonl"


def _read_cache(path: Path, header: dict[str, Any], texts: Sequence[str]) -> list[list[int]]:
    """Parses already in ``path`` (a valid prefix); refuses another spaCy / model version."""
    lines = path.read_text(encoding="utf-8").split("\n")
    try:
        found = json.loads(lines[0])
    except json.JSONDecodeError:
        raise VsekitError(f"{path}: damaged parse cache header; delete the file to re-parse") from None
    for key in ("format", "spacy", "model", "model_version", "n"):
        if found.get(key) != header[key]:
            raise ConfigMismatchError(
                f"{path}: parse cache made with {key} {found.get(key)!r}, this is {header[key]!r} "
                f"(spaCy {header['spacy']}, {header['model']} {header['model_version']}); "
                "delete the file to re-parse with this version"
            )
    done: list[list[int]] = []
    for line in lines[1:]:
        try:
            heads = json.loads(line)
        except json.JSONDecodeError:
            break  # a torn last line of an interrupted run: redo it
        if (
            len(done) >= len(texts)
            or not isinstance(heads, list)
            or len(heads) != len(tree_tokens(texts[len(done)]))
        ):
            break
        done.append(heads)
    return done


def _parse_into(
    path: Path,
    header: dict[str, Any],
    unique: list[str],
    done: list[list[int]],
    nlp: Any,
    progress: bool,
    on_chunk: Callable[[int], None] | None,
    chunk_size: int,
) -> None:
    """Parse ``unique[len(done):]`` into ``done`` and the file, a flushed chunk at a time."""
    if done:
        logger.info("%s: resuming the parse at caption %d of %d", path, len(done), len(unique))
    # rewrite the valid prefix (drops a torn line), then append chunk by chunk
    body = "".join(json.dumps(h, separators=(",", ":")) + "\n" for h in done)
    path.write_text(json.dumps(header) + "\n" + body, encoding="utf-8")
    bar = tqdm(
        total=len(unique), initial=len(done), desc="dependency parses", unit="caption", disable=not progress
    )
    with path.open("a", encoding="utf-8") as out:
        for start in range(len(done), len(unique), chunk_size):
            chunk = parse_texts(unique[start : start + chunk_size], nlp)
            out.write("".join(json.dumps(h, separators=(",", ":")) + "\n" for h in chunk))
            out.flush()
            os.fsync(out.fileno())
            done.extend(chunk)
            bar.update(len(chunk))
            if on_chunk is not None:
                on_chunk(len(done))
    bar.close()


def cached_parses(
    texts: Sequence[str],
    cache_root: str | os.PathLike[str] | None = None,
    progress: bool = True,
    nlp: Any = None,
    on_chunk: Callable[[int], None] | None = None,
    chunk_size: int = _CHUNK,
) -> dict[str, list[int]]:
    """``{text: heads}`` for every distinct text, parsed once and kept in the cache (see module doc).

    ``on_chunk(n_done)`` is called after every chunk written (tests interrupt a run with it).
    """
    unique = list(dict.fromkeys(texts))
    nlp = nlp or load_parser()
    ident = spacy_identity(nlp)
    header = {"format": PARSE_FORMAT, **ident, "n": len(unique)}
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    path = _cache_path(unique, ident, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    # one writer per cache file: a second process waits here, then finds the file complete
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = _read_cache(path, header, unique) if path.is_file() else []
        if len(done) < len(unique):
            _parse_into(path, header, unique, done, nlp, progress, on_chunk, chunk_size)
    return dict(zip(unique, done, strict=True))
