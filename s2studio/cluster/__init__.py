"""``s2studio serve`` scaled out on Ray Serve (the optional extra ``s2studio[cluster]``).

The same HTTP API as ``s2studio serve`` (the ASGI app of ``s2studio.server``, routes, streaming,
guards and limits unchanged) served by Ray Serve replicas: each replica loads one ``Pipeline``
when it starts and decodes up to ``max_batch`` requests together; Ray's HTTP proxy spreads
requests over the replicas, replaces a replica that dies and scales their number with the queue.
See docs/cluster.md.

Modules: ``options`` (what a deployment is made of, checked; no Ray, no torch) and
``deployment`` (the Ray Serve application; imports Ray, so it is imported only when used).
Nothing here imports Ray at import time: ``s2studio`` without the extra must install and run.
"""

from __future__ import annotations

from s2studio.errors import S2Error

INSTALL_HINT = "Ray Serve is not installed; install the cluster extra: pip install 's2studio[cluster]'"


class ClusterUnavailable(S2Error):
    """Ray Serve (the ``cluster`` extra) is not installed."""

    def __init__(self) -> None:
        super().__init__(INSTALL_HINT)


def require_ray() -> None:
    """Import Ray Serve or raise ``ClusterUnavailable`` (one line: what to install)."""
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError:
        raise ClusterUnavailable() from None
