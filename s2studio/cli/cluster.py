"""``s2studio cluster serve|status``: the HTTP server on Ray Serve replicas (docs/cluster.md).

Needs the optional extra ``s2studio[cluster]``; without it both commands print one line saying
what to install and exit 2. Ray is imported only when a command runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _options(args: argparse.Namespace):
    from s2studio.cli.options import engine_settings
    from s2studio.cluster.options import ClusterOptions

    settings = engine_settings(args)  # the device flags (-c N, -M) resolved as `serve` resolves them
    api_key = args.api_key if args.api_key is not None else os.environ.get("S2STUDIO_API_KEY") or None
    return ClusterOptions(
        model=os.path.abspath(args.model), tokenizer=os.path.abspath(args.tokenizer) if args.tokenizer else None,
        tokenizer_mode=args.tokenizer_mode, device=settings.device, gpu_layers=args.gpu_layers, dtype=args.dtype,
        threads=args.threads, codec_mode=args.codec_mode, cuda_graphs=args.cuda_graphs,
        voice_dir=os.path.abspath(args.voice_dir) if getattr(args, "voice_dir", None) else None,
        max_batch=args.max_batch, queue_depth=args.queue_depth, api_key=api_key,
        allowed_hosts=args.allowed_hosts, allowed_origins=args.allowed_origins, max_text_chars=args.max_text_chars,
        max_upload_mb=args.max_upload_mb, num_replicas=args.replicas,
        autoscale=args.max_replicas is not None, min_replicas=args.min_replicas,
        max_replicas=args.max_replicas or args.min_replicas, target_ongoing_requests=args.target_ongoing_requests,
        num_cpus=args.cpus_per_replica, num_gpus=args.gpus_per_replica, max_queued_requests=args.max_queued_requests)


def run_serve(args: argparse.Namespace) -> int:
    from s2studio.cluster import require_ray
    from s2studio.server.runner import LOOPBACK_HOSTS

    require_ray()
    options = _options(args)
    if args.address and args.num_cpus:
        from s2studio.errors import InputError

        raise InputError("--num-cpus sizes a Ray cluster started here; a cluster joined with --address has its own.")
    if not os.path.exists(options.model):
        # Checked here too (each replica checks again on its node): a typo is one line, not a
        # cluster of replicas failing to start.
        print(f"warning: {options.model} is not on this machine; every node must have it at that path.",
              file=sys.stderr)
    if args.host not in LOOPBACK_HOSTS:
        print(f"warning: serving on {args.host}: every machine that can reach port {args.port} can use this "
              f"cluster{'' if options.api_key else ' (no --api-key set)'}.", file=sys.stderr)
    from s2studio.cluster import deployment

    replicas = (f"{options.min_replicas}..{options.max_replicas} replicas (autoscaling)" if options.autoscale
                else f"{options.num_replicas} replica{'s' if options.num_replicas != 1 else ''}")
    print(f"starting {replicas} of {options.model} on Ray{' at ' + args.address if args.address else ''} ...",
          file=sys.stderr)
    try:
        url = deployment.start(options, address=args.address, host=args.host, port=args.port,
                               num_cpus=args.num_cpus)
        print(f"serving on {url} ({replicas}, {options.max_batch} at once each; `s2studio cluster status --url "
              f"{url}` lists them; Ctrl+C stops)", file=sys.stderr)
        while True:
            time.sleep(3600)
    finally:
        deployment.stop()


def run_status(args: argparse.Namespace) -> int:
    from s2studio.cluster import require_ray
    from s2studio.remote import RemoteEngine, RemoteSettings

    require_ray()
    engine = RemoteEngine(RemoteSettings(args.url))  # /health needs no key
    health = engine.health()
    address = engine.addresses[0].url
    replicas = health.get("replicas")
    if not isinstance(replicas, list):
        print(f"{address}: one server (not a cluster): {health.get('model')} on {health.get('device')}, "
              f"queue {_queue(health)}")
        return 0
    print(f"{address}: {len(replicas)} replica{'s' if len(replicas) != 1 else ''}, model {health.get('model')}")
    print(f"  {'replica':<12} {'node':<16} {'device':<10} {'codec':<8} {'model':<8} queue (running/waiting/depth)")
    for entry in replicas:
        if not isinstance(entry, dict):
            continue
        print(f"  {str(entry.get('replica'))[:12]:<12} {str(entry.get('node'))[:16]:<16} "
              f"{str(entry.get('device'))[:10]:<10} {str(entry.get('codec_device'))[:8]:<8} "
              f"{'loaded' if entry.get('model_loaded') else 'loading':<8} {_queue(entry)}")
    return 0


def _queue(entry: dict) -> str:
    queue = entry.get("queue") if isinstance(entry.get("queue"), dict) else {}
    return "/".join(str(queue.get(k, "?")) for k in ("running", "waiting", "depth"))


def _replicas(value: str) -> int:
    from s2studio.cluster.options import MAX_REPLICAS

    n = int(value)
    if not 1 <= n <= MAX_REPLICAS:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_REPLICAS}")
    return n


def _min_replicas(value: str) -> int:
    from s2studio.cluster.options import MAX_REPLICAS

    n = int(value)
    if not 0 <= n <= MAX_REPLICAS:
        raise argparse.ArgumentTypeError(f"must be 0..{MAX_REPLICAS}")
    return n


def _resource(limit: int):
    def parse(value: str) -> float:
        amount = float(value)
        if not 0 <= amount <= limit:
            raise argparse.ArgumentTypeError(f"must be 0..{limit}")
        return amount

    return parse


def _target(value: str) -> float:
    amount = float(value)
    if not 0.1 <= amount <= 10_000:
        raise argparse.ArgumentTypeError("must be 0.1..10000")
    return amount


def _queued(value: str) -> int:
    from s2studio.cluster.options import MAX_QUEUED_REQUESTS

    n = int(value)
    if not 1 <= n <= MAX_QUEUED_REQUESTS:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_QUEUED_REQUESTS}")
    return n


def register(subparsers) -> None:
    from s2studio.cli import add_log_level, add_voice_dir
    from s2studio.cli.options import add_engine_options
    from s2studio.cli.serve import _batch_size, _names, _non_negative, _port, _positive, _positive_mb
    from s2studio.cluster.options import (DEFAULT_HTTP_PORT, DEFAULT_MAX_QUEUED_REQUESTS, MAX_CPUS_PER_REPLICA,
                                          MAX_GPUS_PER_REPLICA)
    from s2studio.server.config import DEFAULT_MAX_TEXT_CHARS, DEFAULT_MAX_UPLOAD_MB, DEFAULT_QUEUE_DEPTH, MAX_BATCH

    p = subparsers.add_parser("cluster", help="serve on many GPUs/machines with Ray Serve (extra: s2studio[cluster])",
                              description="The HTTP API of `s2studio serve` on Ray Serve replicas (docs/cluster.md). "
                                          "Needs: pip install 's2studio[cluster]'.")
    add_log_level(p)
    sub = p.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    s = sub.add_parser("serve", help="deploy the replicas and serve until Ctrl+C",
                       description="Start (or join, --address) a Ray cluster, deploy the replicas and serve the "
                                   "same HTTP API as `s2studio serve` through Ray Serve's proxy.")
    add_engine_options(s)
    add_voice_dir(s, outermost=False, helptext="folder of .s2voice voices on every node (default: the studio's)")
    add_log_level(s)
    s.add_argument("--address", default=None,
                   help="Ray cluster to join (e.g. auto, or HEAD_IP:6379; default: start one on this machine)")
    s.add_argument("--num-cpus", type=_positive, default=None,
                   help="CPUs the Ray cluster started on this machine offers (default: all; not with --address)")
    s.add_argument("-H", "--host", default="127.0.0.1",
                   help="address Ray Serve's HTTP proxy binds on every node (default 127.0.0.1: this machine only)")
    s.add_argument("-P", "--port", type=_port, default=DEFAULT_HTTP_PORT, help=f"port (default {DEFAULT_HTTP_PORT})")
    scale = s.add_mutually_exclusive_group()
    scale.add_argument("--replicas", type=_replicas, default=1, help="a fixed number of replicas (default 1)")
    scale.add_argument("--max-replicas", type=_replicas, default=None,
                       help="autoscale up to this many replicas on the requests in flight")
    s.add_argument("--min-replicas", type=_min_replicas, default=1, help="autoscaling: fewest replicas (default 1)")
    s.add_argument("--target-ongoing-requests", type=_target, default=None,
                   help="autoscaling: requests in flight per replica to aim for (default: --max-batch)")
    s.add_argument("--cpus-per-replica", type=_resource(MAX_CPUS_PER_REPLICA), default=1.0,
                   help="CPUs Ray reserves for each replica; its threads unless --threads (default 1)")
    s.add_argument("--gpus-per-replica", type=_resource(MAX_GPUS_PER_REPLICA), default=0.0,
                   help="GPUs Ray reserves for each replica (default 0; use 1 with --device cuda)")
    s.add_argument("--max-batch", type=_batch_size, default=4,
                   help=f"requests each replica decodes together (1..{MAX_BATCH}, default 4)")
    s.add_argument("--queue-depth", type=_non_negative, default=DEFAULT_QUEUE_DEPTH,
                   help=f"requests that may wait in each replica (default {DEFAULT_QUEUE_DEPTH})")
    s.add_argument("--max-queued-requests", type=_queued, default=DEFAULT_MAX_QUEUED_REQUESTS,
                   help=f"requests the proxies hold while every replica is full; beyond that 503 "
                        f"(default {DEFAULT_MAX_QUEUED_REQUESTS})")
    s.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' (default: $S2STUDIO_API_KEY, else none)")
    s.add_argument("--max-upload-mb", type=_positive_mb, default=DEFAULT_MAX_UPLOAD_MB,
                   help=f"largest request body in MB, else 413 (default {DEFAULT_MAX_UPLOAD_MB:g})")
    s.add_argument("--max-text-chars", type=_positive, default=DEFAULT_MAX_TEXT_CHARS,
                   help=f"longest text of one request, else 413 (default {DEFAULT_MAX_TEXT_CHARS})")
    s.add_argument("--allowed-hosts", type=_names, default=(),
                   help="comma-separated Host names accepted besides localhost and the address connected to")
    s.add_argument("--allowed-origins", type=_names, default=(),
                   help="comma-separated web page origins allowed to call the cluster (default none)")
    s.set_defaults(handler=run_serve)

    st = sub.add_parser("status", help="list the replicas: node, device, model, queue",
                        description="Ask the cluster's /health (through Ray Serve's proxy) and list its replicas.")
    add_log_level(st)
    st.add_argument("--url", default=f"http://127.0.0.1:{DEFAULT_HTTP_PORT}",
                    help=f"the cluster's HTTP address (default http://127.0.0.1:{DEFAULT_HTTP_PORT})")
    st.set_defaults(handler=run_status)
