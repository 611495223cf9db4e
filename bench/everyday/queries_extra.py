"""Proposed queries for the extra everyday photos (issue 33), in the style of make_queries.py.

``PRESENT_EXTRA`` rules use the same keys as make_queries.PRESENT (``any``: the photo's main subject or
objects hold one of the labels; ``main``: its main subject is one of them; ``files``: listed by hand;
``require``: a label the photo must also have). They are meant for labels.json and labels-extra.json
together (keys of the extra photos start with ``extra/``), so a rule may also pick photos of the first 152.
``ABSENT_EXTRA`` subjects are in none of the 152 + extra photos (checked against every photo's main,
objects, "maybe" and description). Written by hand from the labels alone, before any model was run on them.

Run ``python bench/everyday/queries_extra.py`` to check the rules against both label files and to list
which of make_queries.ABSENT would stop being absent once the extra photos join the set.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from dataset import relevant  # noqa: E402

PRESENT_EXTRA: list[tuple[str, dict]] = [
    ("a rabbit", {"any": ["rabbit"]}),
    ("two rabbits in a wicker basket", {"files": ["extra/animals/ptb-096.jpg"]}),
    ("two dogs looking out of a window", {"files": ["extra/animals/lom-028.jpg"]}),
    ("a butterfly on a flower", {"any": ["butterfly"]}),
    ("a bee on a purple flower", {"any": ["bee"]}),
    ("a hummingbird in flight", {"any": ["hummingbird"]}),
    ("jellyfish glowing in the dark", {"any": ["jellyfish"]}),
    ("sheep grazing in a field", {"any": ["sheep"]}),
    ("a spider web", {"any": ["spider web"]}),
    ("a motorcycle in a garage", {"any": ["motorcycle"]}),
    ("a rocket on a launch pad", {"any": ["rocket"]}),
    ("an airplane wing above the clouds", {"any": ["airplane"]}),
    ("an old orange bus", {"files": ["extra/vehicles/lbm-082.jpg"]}),
    ("taxis on a city street", {"any": ["taxi"], "require": "street"}),
    ("a lighthouse", {"any": ["lighthouse"]}),
    ("a bridge lit up at night", {"files": ["extra/city/pal-017.jpg"]}),
    ("a cup of coffee", {"any": ["coffee", "espresso", "cappuccino"]}),
    ("red apples", {"any": ["apple"]}),
    ("slices of citrus fruit", {"any": ["orange", "lemon", "lime"]}),
    ("an iced drink with mint leaves", {"files": ["extra/food/tdy-103.jpg"]}),
    ("a water drop on a blade of grass", {"any": ["water drop"]}),
    ("a lone tree in a green meadow", {"files": ["extra/plants/gcc-069.jpg"]}),
    ("looking up at tall trees", {"files": ["extra/plants/tp-007.jpg", "extra/plants/tp-013.jpg"]}),
    ("a snow-covered field", {"files": ["extra/landscapes/tdy-102.jpg"]}),
    ("a stream flowing over rocks in a forest", {"any": ["stream"]}),
    (
        "the sun setting behind mountains",
        {"files": ["extra/landscapes/lom-033.jpg", "extra/landscapes/gcc-065.jpg"]},
    ),
    ("fog over a field", {"any": ["fog"]}),
    ("a wooden pier on a tropical beach", {"any": ["pier"]}),
    (
        "friends sitting around a restaurant table",
        {"files": ["extra/people/dlb-089.jpg", "extra/people/dlb-090.jpg", "extra/people/dlb-093.jpg"]},
    ),
    ("Elvis impersonators", {"files": ["extra/people/dlb-092.jpg"]}),
    ("a surfer riding a wave", {"any": ["surfer"]}),
    ("an astronaut in a spacesuit", {"any": ["astronaut"]}),
    ("a laptop with a phone and a camera on it", {"any": ["laptop"]}),
    ("a game controller", {"any": ["game controller"]}),
    ("an electric bass guitar", {"any": ["bass guitar"]}),
    ("paint brushes", {"any": ["paintbrush"]}),
    ("rusty gears of an old machine", {"any": ["gear"]}),
    ("a glass beaker", {"any": ["beaker"]}),
    ("a mortar and pestle", {"any": ["mortar and pestle"]}),
    ("electronic components and a screwdriver", {"any": ["electronic component"]}),
]

ABSENT_EXTRA = [
    "a giraffe",
    "a hot air balloon",
    "a tractor ploughing a field",
    "a toothbrush",
    "a violin",
    "an ice cream cone",
    "a hamburger and fries",
    "a skateboarder",
    "a washing machine",
    "a ferris wheel",
]

# Words of each absent query checked against every label (main, objects, maybe) and description.
ABSENT_WORDS = {
    "a giraffe": ["giraffe"],
    "a hot air balloon": ["hot air balloon", "air balloon"],
    "a tractor ploughing a field": ["tractor"],
    "a toothbrush": ["toothbrush"],
    "a violin": ["violin", "fiddle", "cello"],
    "an ice cream cone": ["ice cream"],
    "a hamburger and fries": ["hamburger", "burger", "fries"],
    "a skateboarder": ["skateboard"],
    "a washing machine": ["washing machine", "laundry"],
    "a ferris wheel": ["ferris wheel"],
}

# Label words for those make_queries.ABSENT queries whose subject some extra photo shows (checked in main()).
OLD_ABSENT_WORDS = {
    "a dog": ["dog"],
    "a bicycle": ["bicycle", "bicycle symbol"],
    "a laptop computer": ["laptop"],
    "a guitar": ["guitar"],
    "a butterfly": ["butterfly"],
    "sheep grazing": ["sheep"],
    "a motorcycle": ["motorcycle"],
    "an airplane in the sky": ["airplane"],
    "a glass of red wine": ["wine glass", "wine"],
    "a computer keyboard": ["keyboard"],
    "snow-covered mountains": ["snow"],
}


def main() -> None:
    labels = json.loads((HERE / "labels.json").read_text())
    labels.update(json.loads((HERE / "labels-extra.json").read_text()))
    for text, rule in PRESENT_EXTRA:
        found = relevant(labels, rule)
        assert found, text
        assert all(f in labels for f in found), text
        print(f"{len(found):3d}  {text}")
    for text in ABSENT_EXTRA:
        for name, label in labels.items():
            blob = " ".join([label["main"], *label["objects"], *label["maybe"], label["description"]]).lower()
            for word in ABSENT_WORDS[text]:
                assert word not in blob, (text, name)
    print(f"{len(PRESENT_EXTRA)} present, {len(ABSENT_EXTRA)} absent: all checked")
    # make_queries.ABSENT subjects that the extra photos show (those queries stop being absent once merged).
    spec = importlib.util.spec_from_file_location("make_queries", HERE / "make_queries.py")
    assert spec and spec.loader
    make_queries = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_queries)
    extra = {k: v for k, v in labels.items() if k.startswith("extra/")}
    for text in make_queries.ABSENT:
        words = OLD_ABSENT_WORDS.get(text, [])
        hits = [k for k, v in extra.items() if set(words) & {v["main"], *v["objects"], *v["maybe"]}]
        if hits:
            print(f"make_queries.ABSENT {text!r} now fits: {', '.join(hits)}")


if __name__ == "__main__":
    main()
