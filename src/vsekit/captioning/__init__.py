"""Caption generation: the multimodal RNN (Karpathy & Fei-Fei 2015), the structure-content neural
language model (Kiros et al. 2014), nearest-neighbour caption transfer, joint-embedding rerank, one
generator object over the three (:class:`CaptionGenerator`) and the scoring of a split."""

from vsekit.captioning.captioner import MRNNCaptioner
from vsekit.captioning.evaluate import SplitCaptions, caption_split
from vsekit.captioning.generator import METHODS, CaptionGenerator, DecodeSettings
from vsekit.captioning.nearest import NearestNeighbourCaptioner

__all__ = [
    "METHODS",
    "CaptionGenerator",
    "DecodeSettings",
    "MRNNCaptioner",
    "NearestNeighbourCaptioner",
    "SplitCaptions",
    "caption_split",
]
