"""Part-of-speech tags for the SC-NLM's structure variables (Kiros et al. 2014, sec. 2.5: "each t_i
corresponds to the part-of-speech for word w_i").

spaCy's small English model tags the captions *after* our own tokenisation (a ``Doc`` is built from the
token list), so there is exactly one tag per token the language model sees. Only ``tok2vec`` and
``tagger`` run (the parser, NER and lemmatiser are not needed): about 2,000 captions/s on one thread.

We use the fine-grained Penn Treebank tags (``token.tag_``, 27 occur in Flickr8K captions) rather than
the coarse universal tags (``token.pos_``): the fine tags separate NN/NNS, VBZ/VBP/VBG/VBN and JJ/JJR,
which is what tells the model "dogs run" from "dog runs" and "is running" from "is run". Coarse tags
would leave number and verb form to chance, and templates are the only grammar the SC-NLM is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from vsekit.text.spacy_nlp import SPACY_MODEL, load_spacy

__all__ = ["SPACY_MODEL", "load_tagger", "pos_tag"]

_PIPES = ("tok2vec", "tagger")


def load_tagger(name: str = SPACY_MODEL) -> Any:
    """The spaCy pipeline with only the tagger (loaded once per process by :func:`load_spacy`)."""
    return load_spacy(_PIPES, name)


def pos_tag(token_lists: Iterable[Sequence[str]], nlp: Any = None, batch_size: int = 512) -> list[list[str]]:
    """Fine-grained (Penn Treebank) tags, one per token, for each token list. Identical token lists are
    tagged once (Flickr8K has a few hundred exact duplicate captions)."""
    from spacy.tokens import Doc

    nlp = nlp or load_tagger()
    token_lists = [tuple(t) for t in token_lists]
    unique = [t for t in dict.fromkeys(token_lists) if t]
    docs = nlp.pipe((Doc(nlp.vocab, words=list(t)) for t in unique), batch_size=batch_size)
    tagged = {t: [tok.tag_ for tok in doc] for t, doc in zip(unique, docs, strict=True)}
    return [list(tagged[t]) if t else [] for t in token_lists]
