"""What a command waits for before it answers (issue 34 item 7): an `index update` that finds nothing new
loads no model and imports no torch; `index info` neither."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Run in a fresh process: the command's own imports, nothing a test imported before.
PROBE = """
import json, sys
from vsekit.cli import main
sys.argv = ["vsekit", *sys.argv[1:]]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
heavy = ("torch", "vsekit.embedding.pipeline", "onnxruntime", "transformers")
print(json.dumps({"code": code, "loaded": [m for m in heavy if m in sys.modules]}))
"""


def fresh_process(*argv: str) -> tuple[dict, str]:
    """Run ``vsekit *argv`` in a new interpreter: its exit code and the heavy modules it imported, and
    everything it printed."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=300)
    return json.loads(done.stdout.splitlines()[-1]), done.stdout + done.stderr


@pytest.fixture(scope="module")
def small_index(photo_index):
    return photo_index("startup", 4)


def test_an_update_that_finds_nothing_new_loads_no_model(small_index):
    found, output = fresh_process("index", "update", str(small_index.path))
    assert found == {"code": 0, "loaded": []}, output
    assert "0 added, 0 changed, 0 removed, 4 unchanged" in output


def test_index_info_loads_no_model(small_index):
    found, output = fresh_process("index", "info", str(small_index.path))
    assert found == {"code": 0, "loaded": []}, output
    assert "count: 4" in output


def test_serve_loads_the_models_before_it_says_serving(small_index, monkeypatch):
    import uvicorn

    from vsekit.serve import app as serve_app

    opened = []

    class Watched(serve_app.Index):
        @classmethod
        def open(cls, out_dir, model=None):  # noqa: ANN001, ANN206 - as Index.open
            opened.append(super().open(out_dir, model))
            return opened[-1]

    said = []
    monkeypatch.setattr(serve_app, "Index", Watched)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: said.append("running"))
    ready = lambda url: said.append(("serving", opened[0]._model is not None, opened[0]._route is not None))  # noqa: E731
    serve_app.run(small_index.path, port=0, ready=ready, warming=lambda: said.append("warming"))
    assert said == ["warming", ("serving", True, True), "running"]  # the model and the concept route loaded
