"""A real HTTP server on 127.0.0.1 for the benchmarks and tests of data behind URLs: aiohttp's static files (which
answer range requests, as object stores and web servers do), on a free port, from a thread; started and stopped by
whoever uses it."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web

__all__ = ["Server", "SECRET"]

#: the token ``/auth/`` asks for
SECRET = "s3cr3t-t0ken-4711"


class Server:
    """aiohttp serving ``root`` on a free port of 127.0.0.1 from a thread: ``/f`` the files, ``/auth/f`` the same
    files to requests with ``Authorization: Bearer SECRET`` only (403 otherwise), ``/forbidden/f`` 403 always,
    ``/slow/f`` the files after a pause of ``stall`` seconds for the next ``stalls`` requests. ``requests`` and
    ``bytes`` count the requests and the bytes served."""

    def __init__(self, root):
        self.root, self.requests, self.bytes, self.stalls, self.stall = root, 0, 0, 0, 0.0
        self.loop, ready = asyncio.new_event_loop(), threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    @web.middleware
    async def _gate(self, request, handler):
        self.requests += 1
        if request.path.startswith("/slow/") and self.stalls > 0:
            self.stalls -= 1
            await asyncio.sleep(self.stall)
        if request.path.startswith("/forbidden/") or (
                request.path.startswith("/auth/") and request.headers.get("Authorization") != f"Bearer {SECRET}"):
            raise web.HTTPForbidden()
        response = await handler(request)
        if request.method == "GET" and isinstance(response, web.FileResponse) and response._path.is_file():
            size = response._path.stat().st_size  # the range asked for, else the whole file
            asked = request.http_range
            self.bytes += min(asked.stop or size, size) - (asked.start or 0)
        return response

    def _serve(self, ready):
        asyncio.set_event_loop(self.loop)
        app = web.Application(middlewares=[self._gate])
        for prefix in ("/auth/", "/forbidden/", "/slow/", "/"):
            app.router.add_static(prefix, self.root)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    def url(self, name: str, prefix: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{prefix}{name}"

    def stop(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def main(argv: list[str] | None = None) -> None:
    """``python -m bench._http FOLDER``: serve FOLDER in this process until killed; prints the port first."""
    import sys
    import time

    server = Server((argv or sys.argv[1:])[0])
    print(server.port, flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
