"""The vsekit version (its own module so any layer can record it without importing the package root)."""

__version__ = "0.2.0"
