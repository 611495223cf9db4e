"""vsekit: visual-semantic embeddings for ranking, describing, aligning and searching images and sentences."""

__version__ = "0.1.0"
