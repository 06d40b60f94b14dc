"""The Ray Serve application: ``s2studio serve``'s ASGI app in every replica.

Two deployments:

* ``S2Studio`` — the replicas. Each one builds a ``Pipeline`` and the server's ASGI app
  (``s2studio.server.create_app``: the same routes, streaming, guards and limits as ``s2studio
  serve``) when Ray starts it; the app's lifespan loads the model before Ray sends the replica
  any request, so a replica that is still loading never answers "loading". Each replica's own
  queue batches up to ``max_batch`` takes in one pass; Ray sends it no more than its batch and
  queue hold (``ClusterOptions.max_ongoing_requests``) and keeps the rest at the proxy. Every
  response names the replica that made it (``X-S2Studio-Replica``).
* ``ReplicaRegistry`` — one small actor (no CPU reserved) the replicas report to every second:
  device, model state, queue. ``/health`` through the proxy lists every live replica from it, so
  one probe shows the whole deployment; a replica that stops reporting (it died) drops out after
  a few seconds.

Used by ``s2studio cluster serve`` (:func:`start`) and by Ray's own ``serve run``/``serve deploy``
through :func:`app_builder` (``import_path: s2studio.cluster.deployment:app_builder``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import ray
from ray import serve

from s2studio.cluster.options import ClusterOptions

log = logging.getLogger(__name__)

APP_NAME = "s2studio"
REPLICA_HEADER = b"x-s2studio-replica"
REPORT_INTERVAL_S = 1.0
STALE_AFTER_S = 5.0  # a replica silent this long is gone (killed, its node lost)
SNAPSHOT_TIMEOUT_S = 5.0
# Ray logs every request and every report at INFO; a replica's own warnings are what matter.
QUIET_LOGS = {"log_level": "WARNING", "enable_access_log": False}


@serve.deployment(name="ReplicaRegistry", num_replicas=1, ray_actor_options={"num_cpus": 0},
                  max_ongoing_requests=1000, logging_config=QUIET_LOGS)
class ReplicaRegistry:
    """The latest report of every replica, for ``/health``."""

    def __init__(self) -> None:
        self._reports: dict[str, tuple[float, dict]] = {}

    def report(self, entry: dict) -> None:
        self._reports[entry["replica"]] = (time.monotonic(), entry)

    def snapshot(self) -> list[dict]:
        now = time.monotonic()
        for replica, (seen, _) in list(self._reports.items()):
            if now - seen > STALE_AFTER_S:
                del self._reports[replica]
        return [entry for _, (_, entry) in sorted(self._reports.items())]


class ReplicaHeader:
    """ASGI wrapper: every HTTP response says which replica made it."""

    def __init__(self, app, replica: str):
        self.app = app
        self._value = replica.encode("latin-1", "replace")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # the lifespan goes to the app untouched
            return await self.app(scope, receive, send)

        async def send_tagged(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (REPLICA_HEADER, self._value)]}
            await send(message)

        return await self.app(scope, receive, send_tagged)


@serve.deployment(name="S2Studio", logging_config=QUIET_LOGS)
@serve.ingress()  # the app is built per replica, in __serve_build_asgi_app__
class S2StudioReplica:
    def __init__(self, options: ClusterOptions, registry=None):
        self.options = options
        self.registry = registry
        self.replica = serve.get_replica_context().replica_tag
        self.node = ray.util.get_node_ip_address()
        self._server = None
        self._reporter: asyncio.Task | None = None

    async def __serve_build_asgi_app__(self):
        from s2studio.engine.pipeline import Pipeline
        from s2studio.engine.voices import VoiceLibrary, default_voice_dir
        from s2studio.server import create_app

        voice_dir = self.options.voice_dir or str(default_voice_dir())
        os.makedirs(voice_dir, exist_ok=True)  # so the folder checks resolve against a real path
        pipeline = Pipeline(self.options.engine_settings(), voices=VoiceLibrary(voice_dir))
        # Loaded by the app's lifespan, which Ray runs before the replica takes requests.
        app = create_app(pipeline, self.options.server_config(voice_dir), health_extra=self._cluster_health)
        self._server = app.state.server
        if self.registry is not None:
            self._reporter = asyncio.get_running_loop().create_task(self._report_forever())
        return ReplicaHeader(app, self.replica)

    def _entry(self) -> dict:
        info = self._server.pipeline.model_info(load=False)
        queue = self._server.queue
        return {"replica": self.replica, "node": self.node, "device": info.device, "codec_device": info.codec_device,
                "model_loaded": info.loaded, "max_batch": self.options.max_batch,
                "queue": {"running": queue.running, "waiting": queue.waiting, "depth": queue.depth}}

    async def _report_forever(self) -> None:
        while True:
            try:
                await self.registry.report.remote(self._entry())
            except Exception as exc:  # the registry restarting: the next report will do
                log.debug("replica report failed: %s", exc)
            await asyncio.sleep(REPORT_INTERVAL_S)

    async def _cluster_health(self) -> dict:
        """``/health``'s cluster part: this replica, and every live replica (this one fresh)."""
        me = self._entry()
        replicas = [me]
        if self.registry is not None:
            async def snapshot():
                return await self.registry.snapshot.remote()

            try:
                others = await asyncio.wait_for(snapshot(), SNAPSHOT_TIMEOUT_S)
                replicas += [e for e in others if e.get("replica") != self.replica]
            except Exception as exc:
                log.warning("the replica registry did not answer: %s", exc)
        replicas.sort(key=lambda e: e["replica"])
        return {"replica": self.replica, "replicas": replicas}


def build_app(options: ClusterOptions):
    """The Serve application of ``options`` (to ``serve.run``)."""
    return S2StudioReplica.options(**options.deployment_options()).bind(options, ReplicaRegistry.bind())


def app_builder(args: dict):
    """For ``serve run``/``serve deploy``: the config file's ``args`` (or ``key=value`` on the
    ``serve run`` command line) are ``ClusterOptions``."""
    return build_app(ClusterOptions.from_mapping(dict(args or {})))


def start(options: ClusterOptions, address: str | None = None, host: str = "127.0.0.1", port: int = 8000,
          num_cpus: int | None = None) -> str:
    """Connect to the Ray cluster at ``address`` (None: start one on this machine), start Serve's
    HTTP proxy on ``host:port`` and deploy the application; returns its URL once every replica is
    ready (the model loaded)."""
    if not ray.is_initialized():
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING,
                 configure_logging=False)
    serve.start(http_options={"host": host, "port": port}, logging_config=QUIET_LOGS)
    serve.run(build_app(options), name=APP_NAME, route_prefix="/", blocking=False)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def stop(shutdown_ray: bool = True) -> None:
    """Remove the application and Serve; shut Ray down if this process started it."""
    try:
        serve.shutdown()
    finally:
        if shutdown_ray and ray.is_initialized():
            ray.shutdown()
