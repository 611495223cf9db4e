"""Region-word alignment (Karpathy & Fei-Fei 2015, sec. 3.1): S_kl scores, the aligner, MRF segments.

- :mod:`~vsekit.alignment.score`: S_kl (Eq. 8) and the sum of positive parts (Eq. 7), batched and chunked;
- :mod:`~vsekit.alignment.mrf`: the chain MRF of Eq. 10-12, solved exactly by dynamic programming;
- :mod:`~vsekit.alignment.model`: the aligner network, its file format, :class:`Aligner` (files in);
- :mod:`~vsekit.alignment.trainer`: training on the shared engine (Eq. 9 through the ranking loss);
- :mod:`~vsekit.alignment.evaluate`: ranking a split by S_kl, the usual R@K JSON;
- :mod:`~vsekit.alignment.align`: one image and one sentence -> per-word regions, MRF segments, a picture.

Above captioning and embedding, beside retrieval; the image side comes from ``vision.regions``, the words
from ``text.brnn``.
"""

from vsekit.alignment.model import ALIGNER_FORMAT, Aligner, RegionAligner, load_aligner, save_aligner
from vsekit.alignment.mrf import mrf_align, segments
from vsekit.alignment.score import SCORES, alignment_scores, word_region_dots

__all__ = [
    "ALIGNER_FORMAT",
    "SCORES",
    "Aligner",
    "RegionAligner",
    "alignment_scores",
    "load_aligner",
    "mrf_align",
    "save_aligner",
    "segments",
    "word_region_dots",
]
