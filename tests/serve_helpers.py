"""A uvicorn server in a thread, for the tests that talk HTTP to the app (the browser and the API fuzzer)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(app: Any) -> Iterator[str]:
    """Serve ``app`` on a free port of 127.0.0.1 until the block ends, configured as ``vsekit serve``
    configures uvicorn (the request-head deadline included); yields its base URL."""
    import uvicorn

    from vsekit.serve.app import uvicorn_config

    port = free_port()
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):  # wait for the socket, not for a fixed time
        if server.started:
            break
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
