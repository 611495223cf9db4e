"""A deadline for request bodies: a client that sends its upload slowly cannot hold the server forever.

uvicorn times out idle keep-alive connections but not a request whose body trickles in (a "slow body"
client, one byte now and then): the request waits in ``receive()`` for as long as the client likes. This
ASGI middleware gives the whole body ``seconds`` from the app's first read; past that the request is
answered 408 with a JSON error (if nothing was sent yet) and the connection is closed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

__all__ = ["BodyDeadline"]


class _BodyTooSlow(Exception):
    pass


class BodyDeadline:
    """ASGI middleware: the request body must arrive within ``seconds`` of the app's first read."""

    def __init__(self, app: Any, seconds: float) -> None:
        self.app, self.seconds = app, float(seconds)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        state = {"deadline": None, "body_done": False, "expired": False, "answered": False}

        async def timed_receive() -> dict:
            if state["body_done"]:  # after the body: waiting for a disconnect is not bounded here
                return await receive()
            if state["deadline"] is None:
                state["deadline"] = loop.time() + self.seconds
            try:
                message = await asyncio.wait_for(receive(), max(0.0, state["deadline"] - loop.time()))
            except TimeoutError:
                state["expired"] = True
                raise _BodyTooSlow from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["body_done"] = True
            return message

        async def guarded_send(message: dict) -> None:
            # the app may turn the failed read into an answer of its own (a 400 "error parsing the
            # body"): past the deadline the answer is this 408, whatever the app says
            if not state["expired"]:
                if message["type"] == "http.response.start":
                    state["answered"] = True
                await send(message)
            elif not state["answered"]:
                await self._answer_408(send)
                state["answered"] = True

        try:
            await self.app(scope, timed_receive, guarded_send)
        except _BodyTooSlow:
            pass
        if state["expired"] and not state["answered"]:
            await self._answer_408(send)

    async def _answer_408(self, send: Any) -> None:
        body = json.dumps({"error": f"request body not received within {self.seconds:g} s"}).encode()
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 408, "headers": headers})
        await send({"type": "http.response.body", "body": body})
