"""Write queries.json: the everyday validation set's queries and their relevance lists, from labels.json.

It covers both parts of the set: the 152 photos of ../shared/data/everyday (labels.json) and the 107 photos
that fetch_extra.py takes from other Debian packages (labels-extra.json, keys "extra/..."; their queries are
in queries_extra.py). A present query names the labels that make a photo fit it (``any``: the photo's main
subject or objects hold one of them; ``main``: its main subject is one of them; ``files``: listed by hand
where a label is too broad); ``require`` adds a label the photo must also have. An absent query's subject
is in none of the 259 photos (its words, ``ABSENT_WORDS``, checked against every photo's main subject,
objects and "maybe" list). Written by hand on 2026-11-25 from the labels alone; the 152 photos' queries
before any model was run on them; rerun after editing the rules below.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from dataset import relevant  # noqa: E402
from queries_extra import ABSENT_WORDS as ABSENT_EXTRA_WORDS  # noqa: E402
from queries_extra import PRESENT_EXTRA  # noqa: E402

P = "photos"

PRESENT: list[tuple[str, dict]] = [
    ("a cat", {"any": ["cat"]}),
    ("a kitten on a wooden floor", {"any": ["kitten"]}),
    ("fish swimming underwater", {"any": ["fish"]}),
    ("a school of fish", {"files": ["animals/gc-004.jpg", "animals/gc-010.jpg", "animals/gc-012.jpg"]}),
    ("a fish in an aquarium", {"any": ["aquarium"]}),
    ("a lizard on a branch", {"any": ["lizard"]}),
    ("whales in the sea", {"any": ["whale", "narwhal"]}),
    ("cows grazing in a field", {"any": ["cow"]}),
    ("a windmill", {"any": ["windmill"]}),
    ("a pyramid in the desert", {"any": ["pyramid"], "require": "desert"}),
    ("a pyramid", {"any": ["pyramid"]}),
    ("a castle", {"any": ["castle"]}),
    ("a cathedral", {"any": ["cathedral"]}),
    ("a church", {"any": ["church", "cathedral"]}),
    ("the inside of a church", {"files": ["buildings/ocv-094.jpg"]}),
    ("a tall tower", {"main": ["tower"]}),
    ("the Eiffel Tower", {"any": ["eiffel tower"]}),
    ("a stone arch", {"main": ["arch"]}),
    ("ancient ruins", {"any": ["ruins"]}),
    ("a bridge over a river", {"any": ["bridge", "aqueduct"]}),
    ("a statue", {"any": ["statue", "bust"]}),
    ("a temple", {"any": ["temple", "stupa"]}),
    ("a palace", {"any": ["palace"]}),
    ("a lake surrounded by forest", {"any": ["lake"]}),
    ("a dam", {"any": ["dam"]}),
    ("a coral reef", {"any": ["coral", "coral reef"]}),
    ("a starfish on the seabed", {"any": ["starfish"]}),
    ("a beach with waves", {"any": ["beach"]}),
    ("a canyon", {"any": ["canyon"]}),
    ("railway tracks", {"any": ["railway", "track"]}),
    ("a single tree on a hill", {"files": ["landscapes/ocv-105.jpg"]}),
    ("a red bus", {"any": ["bus"], "require": "road"}),
    ("a double-decker bus", {"any": ["double-decker bus"]}),
    ("a space shuttle", {"any": ["space shuttle"]}),
    ("a pair of pliers", {"any": ["pliers"]}),
    ("a screwdriver", {"any": ["screwdriver"]}),
    ("a hammer", {"any": ["hammer", "mallet"]}),
    ("a tape measure", {"any": ["tape measure"]}),
    ("a pair of scissors", {"any": ["scissors"]}),
    ("a teacup", {"any": ["teacup"]}),
    ("solar panels", {"any": ["solar panel"]}),
    ("a solar cooker", {"any": ["solar cooker", "solar oven"]}),
    ("coins", {"any": ["coin"]}),
    ("an alarm clock", {"any": ["alarm clock"]}),
    ("a kiwi fruit", {"any": ["kiwi"]}),
    ("red and green peppers", {"any": ["pepper", "bell pepper"]}),
    ("a pumpkin", {"any": ["pumpkin"]}),
    ("a portrait of a man's face", {"any": ["face"]}),
    ("an open hand", {"main": ["hand"]}),
    ("people walking across a campus", {"files": ["people/ocv-122.jpg"]}),
    ("a street sign", {"main": ["sign"]}),
    ("a colorful mural", {"any": ["mural"]}),
    ("a basketball hoop", {"any": ["basketball hoop"]}),
    ("a dandelion", {"any": ["dandelion"]}),
    ("a green leaf", {"main": ["leaf"]}),
    ("two books standing upright", {"files": ["things/ocv-037.jpg"]}),
    ("a projector", {"any": ["projector"]}),
    ("a sickle", {"any": ["sickle"]}),
    ("the Taj Mahal", {"any": ["taj mahal"]}),
    ("the Sydney Opera House", {"any": ["sydney opera house"]}),
    ("a fort by the sea", {"any": ["fort"]}),
    ("a village on a cliff", {"files": ["buildings/gc-069.jpg"]}),
    ("a grain silo", {"any": ["silo"]}),
    ("tin shacks", {"any": ["shack"]}),
    (
        "a building with a big dome",
        {"files": ["buildings/gc-054.jpg", "buildings/ocv-093.jpg", "buildings/gc-071.jpg"]},
    ),
    ("an old brick house with chimneys", {"files": ["buildings/gc-088.jpg"]}),
]

# The extra photos show what some first-part absent queries asked for: those became present queries.
PRESENT += [("a dog", {"any": ["dog"]}), ("a guitar", {"any": ["guitar", "bass guitar"]}), *PRESENT_EXTRA]

# Each absent query with the label words that would make a photo fit it (checked against every photo's
# main subject, objects and "maybe" list).
ABSENT_WORDS = {
    "a birthday cake with candles": ["cake", "candle"],
    "a plate of spaghetti": ["spaghetti", "pasta"],
    "a pizza": ["pizza"],
    "a sunflower": ["sunflower"],
    "an elephant": ["elephant"],
    "soccer players on a field": ["soccer ball", "football", "soccer"],
    "a baby": ["baby"],
    "a banana": ["banana"],
    "a tennis racket": ["tennis racket", "racket"],
    "a snowman": ["snowman"],
    "a bride and groom": ["bride", "groom", "wedding dress"],
    "a teddy bear": ["teddy bear"],
} | ABSENT_EXTRA_WORDS
ABSENT = [*ABSENT_WORDS]


def main() -> None:
    labels = json.loads((HERE / "labels.json").read_text())
    labels.update(json.loads((HERE / "labels-extra.json").read_text()))
    queries = []
    for text, rule in PRESENT:
        found = relevant(labels, rule)
        assert found, text
        assert all(f in labels for f in found), text
        queries.append({"query": text, "relevant": found})
    for text in ABSENT:
        words = set(ABSENT_WORDS[text])
        fits = [n for n, v in labels.items() if words & {v["main"], *v["objects"], *v["maybe"]}]
        assert not fits, (text, fits)
        queries.append({"query": text, "relevant": []})
    (HERE / "queries.json").write_text(json.dumps(queries, indent=1) + "\n")
    print(f"{len(PRESENT)} present, {len(ABSENT)} absent")


if __name__ == "__main__":
    main()
