"""The sentence-encoder factory: encoders for the joint space built by name from a config (open_clip-style).

``build_text_encoder(name, vocab, **kwargs)`` is the one way the trainer and ``load_model`` make an
encoder, so a saved model only needs ``encoder.config()`` (which includes ``name``) to be rebuilt.
"""

from __future__ import annotations

import inspect

from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError
from vsekit.text.encoders import (
    BagOfWordsEncoder,
    RNNEncoder,
    TextEncoder,
    no_pretrained_init,
    pretrained_init_enabled,
)
from vsekit.text.tree_lstm import TreeLSTMEncoder

__all__ = [
    "EMBED_DIM_KWARG",
    "TEXT_ENCODERS",
    "BagOfWordsEncoder",
    "RNNEncoder",
    "TextEncoder",
    "TreeLSTMEncoder",
    "build_text_encoder",
    "encoder_spec",
    "no_pretrained_init",
    "pretrained_init_enabled",
]

#: Names accepted by :func:`build_text_encoder`.
TEXT_ENCODERS: tuple[str, ...] = ("gru", "lstm", "bow", "minilm", "tree-lstm")

#: The constructor argument that sets each encoder's output size K (used by the trainer's ``embed_dim``).
EMBED_DIM_KWARG: dict[str, str] = {
    "gru": "hidden_dim",
    "lstm": "hidden_dim",
    "bow": "output_dim",
    "minilm": "output_dim",
    "tree-lstm": "hidden_dim",
}


def _minilm_class() -> type:
    """Import the pretrained MiniLM encoder only when asked for (it is heavier and may be absent)."""
    try:
        from vsekit.text.pretrained import MiniLMEncoder
    except ModuleNotFoundError as exc:
        if exc.name not in ("vsekit.text.pretrained",):
            raise VsekitError(f"the 'minilm' text encoder needs the package {exc.name!r}: {exc}") from exc
        raise VsekitError(
            "the 'minilm' text encoder is not available in this vsekit (vsekit.text.pretrained is missing)"
        ) from None
    return MiniLMEncoder


def build_text_encoder(name: str, vocab: Vocabulary | None = None, **kwargs) -> TextEncoder:
    """Build the text encoder ``name`` (one of :data:`TEXT_ENCODERS`) with constructor ``kwargs``.

    ``vocab`` is required by the word-based encoders (gru, lstm, bow, tree-lstm); the pretrained MiniLM
    brings its own tokenizer and ignores it. Unknown names and unknown kwargs raise VsekitError naming them.
    """
    if name not in TEXT_ENCODERS:
        raise VsekitError(f"unknown text encoder {name!r}; known: {', '.join(TEXT_ENCODERS)}")
    if name == "minilm":
        cls = _minilm_class()
        if "vocab" in inspect.signature(cls).parameters:
            kwargs["vocab"] = vocab
        return _construct(cls, name, **kwargs)
    if vocab is None:
        raise VsekitError(f"the {name!r} text encoder needs a vocabulary")
    if name in ("gru", "lstm"):
        cell = kwargs.pop("cell", name)
        if cell != name:
            raise VsekitError(f"text encoder {name!r} was given cell={cell!r}")
        return _construct(RNNEncoder, name, vocab, cell=name, **kwargs)
    if name == "tree-lstm":
        return _construct(TreeLSTMEncoder, name, vocab, **kwargs)
    return _construct(BagOfWordsEncoder, name, vocab, **kwargs)


def encoder_spec(encoder: TextEncoder) -> tuple[str, dict]:
    """``(registry name, constructor kwargs)`` of an encoder, whether or not its ``config()`` has "name".

    Word-based encoders put their name in ``config()``; the pretrained MiniLM does not, so its name is
    taken from the class. ``build_text_encoder(name, vocab, **kwargs)`` rebuilds the architecture.
    """
    kwargs = dict(encoder.config())
    name = kwargs.pop("name", None) or getattr(encoder, "name", None)
    if name not in TEXT_ENCODERS:
        name = {"MiniLMEncoder": "minilm", "BagOfWordsEncoder": "bow"}.get(type(encoder).__name__, name)
    if name not in TEXT_ENCODERS:
        raise VsekitError(f"cannot tell the registry name of text encoder {type(encoder).__name__}")
    return name, kwargs


def _construct(cls: type, name: str, *args, **kwargs) -> TextEncoder:
    params = inspect.signature(cls).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(k for k in kwargs if k not in params)
        if unknown:
            allowed = ", ".join(p for p in params if p not in ("self", "vocab", "cell"))
            raise VsekitError(
                f"text encoder {name!r}: unknown option(s) {', '.join(unknown)} (options: {allowed})"
            )
    return cls(*args, **kwargs)
