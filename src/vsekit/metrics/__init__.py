"""Pure metric functions: ranking (Recall@K, median rank, the flickr / coco protocols) and caption scores
(BLEU, METEOR, ROUGE-L, CIDEr-D through pycocoevalcap), invented objects (CHAIR). No model code is imported
here."""

from vsekit.metrics.captions import METRIC_KEYS, java_available, require_caption_metrics, score_captions
from vsekit.metrics.chair import chair, subject_named
from vsekit.metrics.ranking import (
    PROTOCOLS,
    embedding_ranks,
    evaluate_embeddings,
    evaluate_protocol,
    positives_from_ids,
    ranking_metrics,
    ranks_from_scores,
    summarize_ranks,
)

__all__ = [
    "METRIC_KEYS",
    "PROTOCOLS",
    "chair",
    "embedding_ranks",
    "evaluate_embeddings",
    "evaluate_protocol",
    "java_available",
    "positives_from_ids",
    "ranking_metrics",
    "ranks_from_scores",
    "require_caption_metrics",
    "score_captions",
    "subject_named",
    "summarize_ranks",
]
