"""Errors a user can act on. Every message names the file, line, field or split at fault."""


class VsekitError(Exception):
    """Base class: the CLI prints these as one line and exits with status 2."""


class CorpusError(VsekitError):
    """A corpus file is missing, malformed, or inconsistent (names file and line where known)."""


class ImageError(VsekitError):
    """An image file is missing or cannot be decoded."""


class ConfigMismatchError(VsekitError):
    """A cache, checkpoint or feature file was made with another configuration."""


class WeightsError(VsekitError):
    """Backbone weights cannot be found or do not match the architecture."""
