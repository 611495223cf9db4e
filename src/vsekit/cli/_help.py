"""How `vsekit --help` reads: the commands grouped by what a user does (typer's rich_help_panel) and one
example each (the epilog of `vsekit COMMAND --help`). Help texts are Markdown (``rich_markup_mode``), so
``[extra]`` is kept as written and a paragraph's line breaks in the source are not shown."""

from __future__ import annotations

from typing import Any

START = "Start here"
PHOTOS = "Photo search"
MODELS = "Models & evaluation"
TRAINING = "Training"

PANELS = {
    "demo": START,
    "index": PHOTOS,
    "search": PHOTOS,
    "serve": PHOTOS,
    "caption": PHOTOS,
    "models": MODELS,
    "eval": MODELS,
    "rank": MODELS,
    "align": MODELS,
    "regions": MODELS,
    "extract": TRAINING,
    "train": TRAINING,
    "train-captioner": TRAINING,
    "train-scnlm": TRAINING,
    "train-aligner": TRAINING,
    "train-region-captioner": TRAINING,
}

# One example per command, shown under its options on a line of its own (Markdown: a code span keeps spaces
# and brackets); at most 78 characters, so that it never wraps in an 80-column terminal.
EXAMPLES = {
    "demo": "vsekit demo",
    "index": "vsekit index build photos/ --out photos.index",
    "search": 'vsekit search photos.index "a dog running on the grass" --top 5',
    "serve": "vsekit serve photos.index --port 8000",
    "caption": "vsekit caption photos/",
    "models": "vsekit models captioner",
    "eval": "vsekit eval --data flickr8k/ --split dev --json dev.json",
    "rank": 'vsekit rank --sentence "a dog runs through the snow" --data flickr8k/',
    "align": 'vsekit align --image photo.jpg --sentence "a dog on the grass" --out fig.png',
    "regions": "vsekit regions --image photo.jpg --out fig.png --top 5",
    "extract": "vsekit extract --data flickr8k/ --backbone efficientnet_lite0",
    "train": "vsekit train --data flickr8k/ --recipe vse-best --out runs/best",
    "train-captioner": "vsekit train-captioner --data flickr8k/ --recipe mrnn-lstm --out runs/cap",
    "train-scnlm": "vsekit train-scnlm --data flickr8k/ --out runs/scnlm",
    "train-aligner": "vsekit train-aligner --data flickr8k/ --recipe minilm-grid --out runs/align",
    "train-region-captioner": "vsekit train-region-captioner --data flickr8k/ --out runs/regions",
}


# Recipe lists too long for the options column (a name such as minilm-grid-constant-lr would be cut at 80
# columns) go under the options instead.
RECIPE_DIRS = {
    "train-aligner": "ALIGNMENT_RECIPES_DIR",
    "train-region-captioner": "REGION_CAPTION_RECIPES_DIR",
}


def help_for(name: str) -> dict[str, Any]:
    """The ``app.command`` / ``app.add_typer`` keywords that place command ``name`` and show its example."""
    epilog = f"Example:\n\n`{EXAMPLES[name]}`"
    if name in RECIPE_DIRS:
        from vsekit import resources

        recipes = resources.recipe_names(getattr(resources, RECIPE_DIRS[name]))
        epilog = f"Shipped recipes: {', '.join(recipes)}.\n\n{epilog}"
    return {"rich_help_panel": PANELS[name], "epilog": epilog}
