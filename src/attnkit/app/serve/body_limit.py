"""An ASGI middleware that refuses request bodies over a size limit with a 413 JSON error.

It reads the Content-Length header first and, for bodies sent without one (chunked), counts the
bytes as the application reads them, so an oversized upload is never held in full.
"""

from __future__ import annotations

import json


class BodyTooLarge(Exception):
    pass


class BodyLimitMiddleware:
    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await self._refuse(send)
        received, exceeded, refused = 0, False, False

        async def counted_receive():
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:  # stop reading; the application's answer is replaced below
                exceeded = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def replacing_send(message):
            nonlocal refused
            if not exceeded:
                return await send(message)
            if not refused:
                refused = True
                await self._refuse(send)

        try:
            await self.app(scope, counted_receive, replacing_send)
        except BodyTooLarge:
            if not refused:
                await self._refuse(send)

    async def _refuse(self, send) -> None:
        body = json.dumps({"error": f"request body larger than {self.max_bytes} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
