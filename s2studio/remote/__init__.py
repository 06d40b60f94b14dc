"""The engine on another machine: a client for ``s2studio serve`` (and s2.cpp's ``--server``).

``RemoteEngine`` offers the local ``Pipeline``'s synthesis interface (``synthesize`` → a job
yielding ``AudioChunk``s, then ``result``; ``cancel``) over HTTP, so the CLI and the app can
run on a laptop while the model runs on a GPU box. Standard library only on the wire side
(``http.client``); it uses the engine's torch-free value types and text splitter, never torch.

Modules: ``connection`` (addresses, one HTTP request, errors) and ``engine`` (the job: segments,
streaming, several servers with per-segment retry).
"""

from s2studio.remote.connection import (
    RemoteError,
    ServerAddress,
    ServerBusy,
    ServerDropped,
    ServerRefused,
    ServerUnreachable,
    parse_server_list,
    parse_server_url,
)
from s2studio.remote.engine import RemoteEngine, RemoteSettings

__all__ = ["RemoteEngine", "RemoteError", "RemoteSettings", "ServerAddress", "ServerBusy",
           "ServerDropped", "ServerRefused", "ServerUnreachable", "parse_server_list", "parse_server_url"]
