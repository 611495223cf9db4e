"""Bounds on what a client sends: its request head in time, its body in time and in bytes.

uvicorn times out idle keep-alive connections, but neither a request whose head trickles in (half a
request line, then nothing: "slowloris") nor one whose body does (a byte now and then), and without a
Content-Length header it reads a chunked body for as long as the client sends. Here:

- :class:`BodyGuard` (ASGI middleware) gives the whole body ``seconds`` from the app's first read (past
  that, a 408) and counts its bytes as they arrive (past ``max_bytes``, a 413 at once: the rest is
  never read, so nothing is spooled past the limit). Either answer closes the connection.
- :func:`header_deadline_protocol` is uvicorn's h11 protocol with a deadline on the request head: a
  connection that has not sent a complete head ``seconds`` after it opened (or after its previous
  answer) gets a 408 and is closed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

__all__ = ["BodyGuard", "header_deadline_protocol"]


class _BodyRefused(Exception):
    pass


def _json_answer(status: int, message: str) -> tuple[dict, dict]:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    headers.append((b"content-length", str(len(body)).encode()))
    return (
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": body},
    )


class BodyGuard:
    """ASGI middleware: the request body must arrive within ``seconds`` of the app's first read (else
    408) and hold at most ``max_bytes`` (else 413, as soon as the limit is passed)."""

    def __init__(self, app: Any, seconds: float, max_bytes: int | None = None) -> None:
        self.app, self.seconds, self.max_bytes = app, float(seconds), max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        state: dict[str, Any] = {"deadline": None, "body_done": False, "refusal": None, "answered": False}
        received = 0

        async def guarded_receive() -> dict:
            nonlocal received
            if state["body_done"]:  # after the body: waiting for a disconnect is not bounded here
                return await receive()
            if state["deadline"] is None:
                state["deadline"] = loop.time() + self.seconds
            try:
                message = await asyncio.wait_for(receive(), max(0.0, state["deadline"] - loop.time()))
            except TimeoutError:
                state["refusal"] = (408, f"request body not received within {self.seconds:g} s")
                raise _BodyRefused from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["body_done"] = True
            received += len(message.get("body", b""))
            if self.max_bytes is not None and received > self.max_bytes:
                state["refusal"] = (413, f"request body over {self.max_bytes} bytes")
                raise _BodyRefused
            return message

        async def guarded_send(message: dict) -> None:
            # the app may turn the failed read into an answer of its own (a 400 "error parsing the
            # body"): once the body is refused the answer is the refusal, whatever the app says
            if state["refusal"] is None:
                if message["type"] == "http.response.start":
                    state["answered"] = True
                await send(message)
            elif not state["answered"]:
                await self._refuse(send, *state["refusal"])
                state["answered"] = True

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except _BodyRefused:
            pass
        if state["refusal"] is not None and not state["answered"]:
            await self._refuse(send, *state["refusal"])

    @staticmethod
    async def _refuse(send: Any, status: int, message: str) -> None:
        for part in _json_answer(status, message):
            await send(part)


def header_deadline_protocol(seconds: float) -> type:
    """uvicorn's h11 protocol class whose connections must send a complete request head within
    ``seconds`` of opening, and of each answer on a kept-alive connection (for ``uvicorn.Config(http=)``)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    body = json.dumps({"error": f"request head not received within {seconds:g} s"}).encode()
    answer = (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )

    class HeaderDeadlineProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(seconds, self._head_expired)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_expired(self) -> None:
            self._head_timer = None
            # still waiting for a request head (h11's IDLE), not inside a request the app is serving
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return
            self.transport.write(answer)
            self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the head is complete
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._arm()  # the next request's head has the same deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadlineProtocol
