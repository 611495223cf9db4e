"""The joint image-sentence space: the model (and ensembles), a loaded model that embeds files and
sentences (:class:`VSEModel`), the ranking loss, split evaluation and the trainer."""

from vsekit.embedding.evaluate import evaluate_model
from vsekit.embedding.model import EnsembleEmbedding, JointEmbedding
from vsekit.embedding.pipeline import VSEModel

__all__ = ["EnsembleEmbedding", "JointEmbedding", "VSEModel", "evaluate_model"]
