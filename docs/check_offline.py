"""Fail if the built site loads anything from the network (fonts, scripts, styles, images on a CDN).

    python docs/check_offline.py site

A page may *link* to another site (an `<a href>` a reader clicks); it may not *load* from one: every
`<script src>`, `<link href>`, `<img src>`, `<source>`, `<iframe>` and CSS `url(...)` / `@import` must be
a path inside the site, so the site works from file:// or a local server with no network.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LOADS = re.compile(
    r"<(?:script|img|source|iframe|embed|audio|video)\b[^>]*?\bsrc\s*=\s*[\"']?((?:https?:)?//[^\"'\s>]+)"
    r"|<link\b[^>]*?\bhref\s*=\s*[\"']?((?:https?:)?//[^\"'\s>]+)",
    re.I,
)
CSS_LOADS = re.compile(r"(?:url\(\s*[\"']?|@import\s+[\"'])((?:https?:)?//[^\"')\s]+)", re.I)


def external_loads(site: Path) -> list[str]:
    """Every network URL a built page or stylesheet would load, as 'file: url'."""
    found = []
    for path in sorted(site.rglob("*")):
        if path.suffix == ".html":
            text = path.read_text(encoding="utf-8", errors="replace")
            urls = [a or b for a, b in LOADS.findall(text)] + CSS_LOADS.findall(text)
        elif path.suffix == ".css":
            urls = CSS_LOADS.findall(path.read_text(encoding="utf-8", errors="replace"))
        else:
            continue
        found += [f"{path.relative_to(site)}: {url}" for url in urls]
    return found


def main() -> int:
    site = Path(sys.argv[1] if len(sys.argv) > 1 else "site")
    if not (site / "index.html").is_file():
        print(f"{site}: no built site (run make docs)", file=sys.stderr)
        return 2
    found = external_loads(site)
    for line in found:
        print(f"loads from the network: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
