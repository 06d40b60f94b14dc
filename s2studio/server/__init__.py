"""Local HTTP server speaking s2.cpp's API (``POST /generate``), OpenAI's speech API
(``/v1/audio/speech``, ``/v1/models``) and Fish Audio's (``/v1/tts``, ``/v1/references/*``), on
the same :class:`~s2studio.engine.pipeline.Pipeline` as the app.

Library: Starlette on uvicorn. Starlette is small, typed, actively maintained (the base of
FastAPI) and lets a response be written as plain ASGI, which the live audio stream needs: the
server must send each decoded chunk the moment it exists *and* notice a client that hangs up
while it is still generating or waiting in the queue (so the job is cancelled). uvicorn is the
reference ASGI server (h11, no compiled parts required) and can serve on a socket we bind
ourselves, which gives tests a free loopback port. aiohttp would do too, but brings its own
client/server stack and C extensions for nothing we need; a stdlib ``http.server`` has no
usable multipart parser and no disconnect notification.

Modules: ``config`` (settings), ``params`` (s2.cpp's form fields and ``params`` JSON),
``voice_select`` (voice ids/paths confined to the voice folder), ``jobs`` (the bounded FIFO
queue and its worker thread), ``responses`` (one-shot and live audio), ``openai`` (OpenAI's
speech body and ``/v1/models``), ``voice_map`` (OpenAI's stock voice names → voices), ``fish``
(Fish Audio's ``/v1/tts`` and fish-speech's reference routes), ``error_shapes`` (each API's own
error body), ``openapi`` (the served document), ``guards`` (browser protections:
Host, Origin, Content-Type and CORS; the API key; the body size and time limits), ``app``
(routes and the JSON error mapping), ``connections`` (uvicorn's h11 protocol with a connection
limit and header/body deadlines; a log that cannot flood) and ``runner`` (uvicorn on a socket
bound before the model loads).

The threat model is a desktop's: any web page the user visits can send requests to the port, so
every request is checked as docs/server.md's Security section describes.
"""

from s2studio.server.config import ServerConfig

__all__ = ["ServerConfig", "ServerThread", "create_app", "serve_forever"]


def __getattr__(name: str):
    # Starlette and uvicorn load only when a server is built, so the CLI's --help (which
    # imports s2studio.server.config) works even where they are not installed.
    if name == "create_app":
        from s2studio.server.app import create_app

        return create_app
    if name in ("ServerThread", "serve_forever"):
        from s2studio.server import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
