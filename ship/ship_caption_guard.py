"""Make the captioner's concept guard table (src/vsekit/pretrained/caption-guard.safetensors).

    apt-get install wordnet-base     # WordNet 3.0 (Princeton licence, redistributable with its notice)
    python ship/ship_caption_guard.py [--wordnet /usr/share/wordnet] [--out FILE]

What :mod:`vsekit.captioning.guard` needs, computed once from data it cannot have at run time:

* **the object words** the guard watches: the shipped captioner's words that spaCy tags as nouns in most of
  their training captions and whose first WordNet sense is a thing one can see (a person, animal, plant,
  artifact, natural object, landform, body of water or substance), not a place relation ("front", "top"),
  an act ("trick") or a group word ("group");
* **evidence[c, w]**: how strongly ImageNet class ``c`` supports object word ``w``. Two sources, the larger
  wins: WordNet (1 when ``w`` names ``c`` or one of its hypernyms: every dog breed supports "dog") and
  co-occurrence in Flickr8K's training captions (the share of photos with class ``c`` whose references
  mention ``w``, weighted by p(c | photo), shrunk toward 0 by ``PRIOR_PHOTOS`` pseudo-photos: a class never
  seen with people says nothing for "man"). The photos are the 5,000 training photos outside the
  validation slice val1000, so the guard's knobs can be chosen there honestly (Fang et al. 2015 learn word
  detectors from captions the same way; here the detector is the fixed ImageNet classifier);
* **the name of every class** a caption can use: the first of its WordNet lemmas and hypernyms (nearest
  first, at most ``NAME_DEPTH`` up) that the captioner itself says (a Flickr8K word: "tabby" -> "cat",
  "goldfish" -> "fish"), else its own first lemma ("pliers");
* **the familiarity reference**: the same photos' features in a 128-d basis (:class:`Familiarity`), so the
  guard can leave photos like the captioner's training photos alone;
* **the novel classes**: those that are the sure top class (p >= ``SEEN``) of none of these photos, so the
  guard can tell a photo the classifier is sure shows something Flickr8K never does.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from _common import PRETRAINED_DIR, SHARED, run_meta
from vsekit.captioning.captioner import load_captioner
from vsekit.captioning.guard import GUARD_FORMAT, Familiarity, save_guard_table
from vsekit.captioning.pos import pos_tag
from vsekit.data import load_corpus
from vsekit.data.splits import load_validation_slice
from vsekit.data.vocab import tokenize
from vsekit.fileio import content_fingerprint
from vsekit.resources import pretrained_path
from vsekit.vision import features as vision_features
from vsekit.vision.classes import class_table, load_classifier

OUT = PRETRAINED_DIR / "caption-guard.safetensors"
PRIOR_PHOTOS = 3.0  # pseudo-photos of shrinkage toward "no evidence" per class
SEEN = 0.2  # a photo counts for a class when the classifier gives the class at least this probability
MIN_COUNT = 10  # an object word is watched once it occurs in this many training captions
NOUN_SHARE = 0.7  # ... and spaCy tags it NN/NNS at least this often
NAME_DEPTH = 6  # a class may be named by a hypernym at most this many steps up
BASIC_CLASSES = 3  # ... that covers at least this many ImageNet classes
#: first-sense hypernyms that make a noun a visible thing (WordNet 3.0 lemma of the hypernym synset)
VISIBLE = {"whole", "geological_formation", "body_of_water", "substance", "matter", "people",
           "social_group", "geographical_area", "physical_phenomenon", "covering"}  # fmt: skip
NOT_VISIBLE = {"region", "extremity", "location", "act", "event", "abstraction", "attribute", "group"}
#: ... which win over those (WordNet files "people" under group and "water" under abstraction too)
SURELY_VISIBLE = {"whole", "geographical_area", "people", "social_group", "substance", "body_of_water"}
#: hypernyms too general to name a class by ("a device"): the class's own lemma is better
TOO_GENERAL = {"object", "whole", "artifact", "instrumentality", "device", "structure", "thing", "animal",
               "organism", "living_thing", "matter", "equipment", "container", "covering", "commodity",
               "implement", "system", "unit", "entity", "physical_entity", "vertebrate", "chordate", "being",
               "construction", "instrument", "piece", "game", "machine", "food", "screen", "wind",
               "formation", "clothing", "vehicle", "home", "fabric", "course", "wood", "seat", "drink",
               "barrier", "wear", "cloth"}  # fmt: skip


def read_wordnet(root: Path) -> tuple[dict[str, tuple[list[str], list[str]]], dict[str, list[str]]]:
    """``synsets[offset] = (lemmas, hypernym offsets)``; ``index[lemma] = offsets``, most frequent first."""
    synsets = {}
    for line in (root / "data.noun").open(encoding="utf-8"):
        if line.startswith("  "):
            continue
        f = line.partition(" | ")[0].split()
        n_words = int(f[3], 16)
        lemmas = [f[4 + 2 * i].lower() for i in range(n_words)]
        k = 4 + 2 * n_words
        ptrs = [f[k + 2 + 4 * i] for i in range(int(f[k])) if f[k + 1 + 4 * i] in ("@", "@i")]
        synsets[f[0]] = (lemmas, ptrs)
    index = {}
    for line in (root / "index.noun").open(encoding="utf-8"):
        if not line.startswith(" "):
            f = line.split()
            index[f[0]] = f[6 + int(f[3]) :]
    return synsets, index


def hypernyms(synsets: dict, offset: str) -> list[str]:
    """Every hypernym of a synset, nearest first (breadth-first)."""
    out, queue, seen = [], [offset], {offset}
    while queue:
        for h in synsets[queue.pop(0)][1]:
            if h not in seen:
                seen.add(h)
                out.append(h)
                queue.append(h)
    return out


def noun_lemma(word: str, index: dict) -> str | None:
    """WordNet's lemma of a (possibly plural) caption word, or None."""
    irregular = {"men": "man", "women": "woman", "children": "child", "people": "people", "feet": "foot"}
    for cand in (irregular.get(word, word), re.sub("ies$", "y", word), re.sub("es$", "", word), word[:-1]):
        if cand in index:
            return cand
    return None


def object_words(vocab, captions: list[list[str]], synsets: dict, index: dict) -> dict[str, str]:
    """Watched word -> its WordNet lemma (module docstring)."""
    tags = pos_tag(captions)
    seen, noun = Counter(), Counter()
    for tokens, tt in zip(captions, tags, strict=True):
        for w, t in zip(tokens, tt, strict=True):
            seen[w] += 1
            noun[w] += t in ("NN", "NNS")
    out = {}
    for w in vocab.words:
        lemma = noun_lemma(w, index)
        if lemma is None or seen[w] < MIN_COUNT or noun[w] < NOUN_SHARE * seen[w]:
            continue
        first = index[lemma][0]
        up = {x for h in (first, *hypernyms(synsets, first)) for x in synsets[h][0]}
        if up & VISIBLE and (up & SURELY_VISIBLE or not up & NOT_VISIBLE):
            out[w] = lemma
    return out


def wordnet_support(words: dict[str, str], synsets: dict, table) -> np.ndarray:
    """``[1000, W]``: 1 where the word's lemma names the class or one of its hypernyms."""
    out = np.zeros((len(table), len(words)), dtype=np.float32)
    column = {}
    for j, lemma in enumerate(words.values()):
        column.setdefault(lemma, []).append(j)
    for c, synset in enumerate(table.synsets):
        offset = synset[1:]
        names = {x for s in (offset, *hypernyms(synsets, offset)) for x in synsets[s][0]}
        for lemma in names & set(column):
            out[c, column[lemma]] = 1.0
    return out


def cooccurrence(probs: np.ndarray, mentions: np.ndarray) -> np.ndarray:
    """``[1000, W]``: sum_i q_ic y_iw / (sum_i q_ic + PRIOR_PHOTOS), y_iw = share of i's references naming
    w, q_ic = p(c|i) where the classifier sees c (p >= ``SEEN``), else 0: the softmax's tail puts some mass
    on every class in every photo, and Flickr8K's photos would lend people to castles through it."""
    seen = np.where(probs >= SEEN, probs, 0.0)
    return (seen.T @ mentions) / (seen.sum(0)[:, None] + PRIOR_PHOTOS)


def typical_evidence(photo_evidence: np.ndarray, mentions: np.ndarray) -> np.ndarray:
    """``[W]``: each word's median evidence over the training photos that show it (at least 2 of 5
    references name it); the guard measures a photo's evidence against it."""
    shown = mentions >= 0.4
    overall = float(np.median(photo_evidence))
    return np.array(
        [
            np.median(photo_evidence[shown[:, j], j]) if shown[:, j].any() else overall
            for j in range(len(shown.T))
        ],
        dtype=np.float32,
    )


def novel_classes(probs: np.ndarray) -> np.ndarray:
    """``[classes]`` bool: the classes that are no photo's top class with probability >= ``SEEN``."""
    top = probs.argmax(axis=1)[probs.max(axis=1) >= SEEN]
    return np.bincount(top, minlength=probs.shape[1]) == 0


def class_names(synsets: dict, table, say: set[str]) -> list[str]:
    """Each class's name in a caption: the nearest hypernym (at most ``NAME_DEPTH`` up) that the captioner
    says and that covers at least ``BASIC_CLASSES`` classes, i.e. the basic-level word of a fine-grained
    class ("tabby" -> "cat", "tench" -> "fish", "golden retriever" -> "retriever"); else its own lemma."""
    chains = [[s[1:], *hypernyms(synsets, s[1:])] for s in table.synsets]
    covers = Counter(x for chain in chains for x in set(chain))
    names = []
    for _c, chain in enumerate(chains):
        own = synsets[chain[0]][0]
        words = [
            w
            for s in chain[1 : NAME_DEPTH + 1]
            if covers[s] >= BASIC_CLASSES
            for w in synsets[s][0]
            if w in say and w not in TOO_GENERAL
        ]
        names.append((next((w for w in own if w in say), None) or (words or own)[0]).replace("_", " "))
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    synsets, index = read_wordnet(args.wordnet)
    captioner_path = pretrained_path("captioner")
    captioner = load_captioner(captioner_path)
    corpus = load_corpus(SHARED)
    held = set(load_validation_slice("flickr8k-val1000").image_ids)
    refs = {
        i: caps for i, caps in corpus.split("train").captions_by_image().items() if caps and i not in held
    }
    ids = sorted(refs)
    tokens = {i: [tokenize(c) for c in refs[i]] for i in ids}
    words = object_words(captioner.vocab, [t for i in ids for t in tokens[i]], synsets, index)
    column = {w: j for j, w in enumerate(words)}
    mentions = np.zeros((len(ids), len(words)), dtype=np.float32)
    for r, i in enumerate(ids):
        for toks in tokens[i]:
            for w in set(toks) & set(column):
                mentions[r, column[w]] += 1 / len(tokens[i])
    feats, _ = vision_features.image_features(corpus, ids, "efficientnet_lite0", "one-layer", progress=True)
    probs = load_classifier("efficientnet_lite0").probabilities(feats)
    table = class_table()
    evidence = np.maximum(wordnet_support(words, synsets, table), cooccurrence(probs, mentions))
    typical = typical_evidence(np.minimum(probs @ evidence, 1.0), mentions)
    say = {w for w, n in captioner.vocab.counts.items() if n >= MIN_COUNT}
    meta = {
        "format": GUARD_FORMAT,
        "backbone": "efficientnet_lite0",
        "captioner_sha256": content_fingerprint(captioner_path),
        "words": list(words),
        "class_names": class_names(synsets, table, say),
        "built": run_meta(
            threads=1, photos=len(ids), prior_photos=PRIOR_PHOTOS, seen=SEEN, min_count=MIN_COUNT
        ),
    }
    novel = novel_classes(probs)
    path = save_guard_table(args.out, evidence, meta, typical, Familiarity.fit(feats), novel)
    names = json.dumps(meta["class_names"][:20])
    print(f"{path}: {len(words)} object words, {int(novel.sum())} novel classes; {names}")


if __name__ == "__main__":
    main()
