"""CHAIR: how many objects a caption invents (Rohrbach et al. 2018, "Object Hallucination in Image
Captioning").

A caption's *mentions* are the object words it contains, each mapped to a canonical object through an object
vocabulary with synonyms ("men", "girl", "skier" -> person; "puppy" -> dog). A mention is *invented* when the
image's labels do not hold that object (Rohrbach et al., sec. 3):

    CHAIR_i = |invented mentions| / |all mentions|                  (per object instance)
    CHAIR_s = |captions with at least one invented mention| / |captions|   (per sentence)

Two departures, both for labels written by looking at a photo rather than COCO's 80 categories:

* a general word is not invented when a more specific one is labelled (:data:`KINDS`): a photo labelled
  "castle" may be called a "building", one labelled "angelfish" a "fish"; the converse stays invented;
* objects labelled *maybe* (too small or unclear) are neither required nor counted as invented: a mention of
  one is grounded.

The vocabulary is the default below (the people and animals of Flickr8K's captions, their usual objects and
scenery) plus every object any image is labelled with, so a caption naming a labelled object of *another*
photo is caught too. ``subject_named`` is the share of captions that name the photo's main subject (its
canonical object, or a more specific kind of it). No model code here: words in, numbers out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from vsekit.errors import VsekitError

__all__ = ["KINDS", "SYNONYMS", "ObjectVocabulary", "chair", "subject_named"]

#: canonical object -> the caption words that mean it (singular; plurals are found by :func:`_singular`).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "person": tuple(
        "person man woman boy girl child kid people player guy lady baby toddler adult teenager teen crowd "
        "team rider biker cyclist bicyclist skier snowboarder surfer skateboarder swimmer climber runner "
        "hiker dancer worker musician performer tourist spectator gentleman family student athlete "
        "soldier policeman cowboy wrestler boxer diver".split()
    ),
    "dog": tuple(
        "dog puppy pup terrier retriever poodle collie beagle dachshund greyhound pug husky".split()
    ),
    "cat": ("cat", "kitten", "kitty", "tabby"),
    "fish": ("fish", "goldfish", "trout", "angelfish", "cichlid", "wrasse", "tench", "carp", "salmon"),
    "bird": ("bird", "duck", "goose", "seagull", "gull", "pigeon", "parrot", "chicken", "swan", "hen"),
    "horse": ("horse", "pony"),
    "cow": ("cow", "cattle", "calf", "bull", "ox"),
    "shirt": ("shirt", "tshirt", "tee"),
    "bike": ("bike", "bicycle"),
    "water": ("water",),
    "sea": ("sea", "ocean"),
    "road": ("road", "street"),
    "sidewalk": ("sidewalk", "pavement"),
    "grass": ("grass", "lawn"),
    "rock": ("rock", "stone", "boulder"),
    "stair": ("stair", "staircase", "step"),
    "sofa": ("sofa", "couch"),
    "cup": ("cup", "mug", "teacup"),
    "ball": ("ball", "football", "soccerball", "basketball", "volleyball", "baseball"),
    "toy": ("toy", "stuffed animal"),
    "hat": ("hat", "cap"),
    "car": ("car", "taxi"),
    "jacket": ("jacket", "coat"),
    "sign": ("sign", "signboard"),
    "lamp post": ("lamp post", "street light", "streetlight", "lamppost"),
}
#: Flickr8K's everyday objects and scenery that no synonym group above holds (each its own canonical).
OBJECTS = tuple(
    "frisbee stick leash rope fence bench chair table building wall tree bush flower field snow beach sand "
    "lake river pool pond mountain hill cliff wave boat kayak canoe bus truck motorcycle skateboard "
    "surfboard snowboard ski helmet sunglasses glasses dress skirt shorts jeans pants uniform costume "
    "swimsuit bag "
    "backpack camera umbrella flag tent bridge fountain statue window door crowd sheep goat bear elephant "
    "horse bed blanket pillow book phone computer guitar microphone drum balloon bubble kite fire sky cloud "
    "mud dirt puddle stream waterfall forest wood park playground slide swing trampoline ramp track train "
    "plane hammer tool box basket bottle glass food cake pizza sandwich fruit apple banana toy animal "
    "mountaintop city street store shop restaurant church castle house tower monument".split()
)
#: specific -> more general canonical objects it is a kind of (a caption may use the general word).
KINDS: dict[str, tuple[str, ...]] = {
    **{
        b: ("building",)
        for b in (
            *"castle palace cathedral church temple mosque tower house cottage shack shed".split(),
            *"cinema museum skyscraper courthouse capitol abbey fort fortress monastery".split(),
            *"store shop restaurant windmill".split(),
            *"silo stupa pagoda barn".split(),
            "opera house",
            "apartment building",
        )
    },  # fmt: skip
    **{
        a: ("animal",)
        for a in "dog cat fish bird horse cow sheep goat bear elephant lizard whale narwhal "
        "starfish penguin eel".split()
    },
    "cathedral": ("church", "building"),
    "fortress": ("fort", "castle", "building"),
    "eel": ("fish", "animal"),
    "narwhal": ("whale", "animal"),
    "palm tree": ("tree",),
    "double-decker bus": ("bus",),
    "alarm clock": ("clock",),
    "coral reef": ("reef",),
    "flower pot": ("pot",),
    "dandelion": ("flower", "plant"),
    "sea": ("water",),
    "lake": ("water",),
    "river": ("water",),
    "pool": ("water",),
    "pond": ("water",),
    "stream": ("water",),
    "waterfall": ("water",),
    "seabed": ("sand", "ground"),
    "forest": ("tree",),
    "mountaintop": ("mountain",),
    "tape measure": ("tool",),
    "hammer": ("tool",),
    "mallet": ("hammer", "tool"),
    "screwdriver": ("tool",),
    "pliers": ("tool",),
    "sickle": ("tool",),
    "chisel": ("tool",),
    "scissors": ("tool",),
    "wire cutter": ("tool",),
    "kiwi": ("fruit",),
    "bell pepper": ("pepper", "vegetable"),
    "chili pepper": ("pepper", "vegetable"),
    "pumpkin": ("vegetable",),
    "pepper": ("vegetable",),
    "taxi": ("car",),
    "van": ("car",),
    "t-shirt": ("shirt",),
    "sweater": ("shirt",),
    "teacup": ("cup",),
}
_IRREGULAR = {"men": "man", "women": "woman", "children": "child", "people": "person", "feet": "foot",
              "teeth": "tooth", "mice": "mouse", "geese": "goose", "oxen": "ox", "leaves": "leaf",
              "knives": "knife", "wolves": "wolf", "shelves": "shelf", "calves": "calf"}  # fmt: skip
#: label words that captions mostly use as verbs or in phrases ("stands", "a number of"): never objects
NOT_OBJECTS = frozenset({"stand", "model", "number", "text", "light", "square", "letter"})
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    """Lower-case alphanumeric words, hyphens and apostrophes dropped ("T-shirt" -> "tshirt")."""
    return _WORD.findall(text.lower().replace("-", "").replace("'", ""))


def _key(phrase: str) -> str:
    return " ".join(_words(phrase))


class ObjectVocabulary:
    """Caption words -> canonical objects, and each object's more general kinds.

    ``extra``: further objects (each its own canonical), e.g. every object the images are labelled with.
    """

    def __init__(self, extra: Iterable[str] = ()) -> None:
        self.canonical: dict[str, str] = {}
        for obj in (*OBJECTS, *KINDS, *(g for gs in KINDS.values() for g in gs), *extra):
            if _key(obj) not in NOT_OBJECTS:
                self.canonical.setdefault(_key(obj), _key(obj))
        for canon, words in SYNONYMS.items():  # synonyms win over a word's own entry
            for word in words:
                self.canonical[_key(word)] = _key(canon)
        self.kinds = {_key(k): tuple(_key(g) for g in gs) for k, gs in KINDS.items()}
        self.longest = max(len(k.split()) for k in self.canonical)

    def object_of(self, word: str) -> str | None:
        """The canonical object of one (possibly plural) word or phrase, or None."""
        key = _key(word)
        if key in self.canonical:
            return self.canonical[key]
        single = _singular(key)
        return self.canonical.get(single) if single else None

    def general(self, obj: str) -> set[str]:
        """``obj`` and every more general object it is a kind of (transitively)."""
        out, todo = {obj}, [obj]
        while todo:
            for g in self.kinds.get(todo.pop(), ()):
                canon = self.canonical.get(g, g)
                if canon not in out:
                    out.add(canon)
                    todo.append(canon)
        return out

    def mentions(self, caption: str) -> list[str]:
        """Canonical objects a caption names, in order, longest phrase first ("palm tree", not "tree")."""
        words, out, i = _words(caption), [], 0
        while i < len(words):
            for n in range(min(self.longest, len(words) - i), 0, -1):
                obj = self.object_of(" ".join(words[i : i + n]))
                if obj is not None:
                    out.append(obj)
                    i += n
                    break
            else:
                i += 1
        return out

    def present(self, objects: Iterable[str]) -> set[str]:
        """What an image's labels allow a caption to name: each labelled object and its general kinds."""
        out: set[str] = set()
        for obj in objects:
            canon = self.object_of(obj) or _key(obj)
            out |= self.general(canon)
        return out


def _singular(word: str) -> str | None:
    """The singular of an English plural noun by the usual rules ("boxes" -> "box"), or None."""
    last = word.split(" ")[-1]
    head = word[: len(word) - len(last)]
    if last in _IRREGULAR:
        return head + _IRREGULAR[last]
    for suffix, repl in (
        ("ies", "y"),
        ("ches", "ch"),
        ("shes", "sh"),
        ("xes", "x"),
        ("sses", "ss"),
        ("s", ""),
    ):
        if last.endswith(suffix) and len(last) > len(suffix) + 1 and not last.endswith(("ss", "us", "is")):
            return head + last[: -len(suffix)] + repl
    return None


def _check_lengths(captions: Sequence[str], per_image: Sequence[object], name: str) -> None:
    if len(captions) != len(per_image):
        raise VsekitError(f"{len(captions)} captions but {len(per_image)} {name}")


def chair(
    captions: Sequence[str],
    objects_per_image: Sequence[Iterable[str]],
    maybe_per_image: Sequence[Iterable[str]] | None = None,
    vocabulary: ObjectVocabulary | None = None,
) -> dict[str, float | int]:
    """CHAIR of one caption per image against each image's labelled objects (module docstring).

    Returns ``chair_s`` and ``chair_i`` (fractions in [0, 1]; ``chair_i`` is 0 when nothing is mentioned),
    ``mentions`` (object mentions counted) and ``invented`` (how many of them are invented)."""
    maybe_per_image = maybe_per_image if maybe_per_image is not None else [()] * len(captions)
    _check_lengths(captions, objects_per_image, "object lists")
    _check_lengths(captions, maybe_per_image, "maybe lists")
    objects = [list(o) for o in objects_per_image]
    maybe = [list(m) for m in maybe_per_image]
    vocab = vocabulary or ObjectVocabulary(w for labels in (*objects, *maybe) for w in labels)
    mentions = invented = bad_captions = 0
    for caption, obj, may in zip(captions, objects, maybe, strict=True):
        allowed = vocab.present([*obj, *may])
        named = vocab.mentions(caption)
        wrong = sum(m not in allowed for m in named)
        mentions, invented, bad_captions = mentions + len(named), invented + wrong, bad_captions + (wrong > 0)
    return {
        "chair_s": bad_captions / len(captions) if captions else 0.0,
        "chair_i": invented / mentions if mentions else 0.0,
        "mentions": mentions,
        "invented": invented,
    }


def subject_named(
    captions: Sequence[str], main_subjects: Sequence[str], vocabulary: ObjectVocabulary | None = None
) -> float:
    """Share of captions naming their image's main subject: its canonical object or a more specific kind
    of it ("a tabby" names "cat"; "a building" does not name "castle")."""
    _check_lengths(captions, main_subjects, "main subjects")
    if not captions:
        return 0.0
    vocab = vocabulary or ObjectVocabulary(main_subjects)
    named = 0
    for caption, main in zip(captions, main_subjects, strict=True):
        target = vocab.object_of(main) or _key(main)
        named += any(target in vocab.general(m) for m in vocab.mentions(caption))
    return named / len(captions)
