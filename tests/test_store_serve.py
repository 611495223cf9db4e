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
