#!/usr/bin/env python3
"""Per-replica throughput through Ray Serve, against the same load on one ``s2studio serve``.

    python benchmarks/bench_cluster.py --model /path/s2-pro-q8_0.gguf [--device cuda --gpus 1]
        [--replicas 1] [--concurrency 4] [--takes 8] [--frames 64] [--rounds 2] [--num-cpus N]

Needs the cluster extra (``pip install 's2studio[cluster]'``). Starts a local Ray cluster and
deploys ``--replicas`` replicas (``s2studio.cluster``), and beside it, in this process, one
server on the same engine settings (``s2studio.server``, loopback). Each round sends the same
load to both, one after the other: ``--takes`` seeded ``POST /generate`` requests of exactly
``--frames`` frames, ``--concurrency`` in flight at once, audio streamed as float32. Reported:
sentences (requests) per second and audio seconds per second, in all and per replica, and the
cluster's throughput per replica as a ratio of the single server's (the cost of the proxy hop
and of Ray's routing; 1.0 = none). Every answer is checked complete. Compare ratios within a
run; absolute figures depend on the machine and its load (printed per run).
"""

from __future__ import annotations

import argparse
import http.client
import json
import pathlib
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from s2studio.cluster.options import ClusterOptions  # noqa: E402

FRAME_SAMPLES = 2048
SAMPLE_RATE = 44100


def loadavg() -> str:
    try:
        return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


STRIDE = 4  # frames per streamed chunk (the server's default); --stride sets it


def one_take(port: int, seed: int, frames: int, api_key: str | None) -> int:
    params = {"stream": True, "chunked": True, "output_format": "pcm_f32le", "stream_start_buffer_ms": 0,
              "stream_decode_stride_frames": STRIDE, "seed": seed, "max_new_tokens": frames, "min_tokens_before_end": frames, "temperature": 0.8}
    boundary = uuid.uuid4().hex
    body = "".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                   for k, v in (("text", f"Benchmark sentence number {seed}."), ("params", json.dumps(params))))
    body = (body + f"--{boundary}--\r\n").encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    try:
        conn.request("POST", "/generate", body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    if response.status != 200 or len(data) != frames * FRAME_SAMPLES * 4:
        raise RuntimeError(f"take {seed}: HTTP {response.status}, {len(data)} bytes: {data[:200]!r}")
    return len(data) // 4


def run_load(port: int, takes: int, concurrency: int, frames: int, first_seed: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda s: one_take(port, s, frames, None), range(first_seed, first_seed + takes)))
    return time.perf_counter() - start


def main() -> int:
    global STRIDE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="per replica and for the single server (0: --cpus)")
    ap.add_argument("--cpus", type=float, default=1.0, help="CPUs Ray reserves per replica")
    ap.add_argument("--gpus", type=float, default=0.0, help="GPUs Ray reserves per replica")
    ap.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray cluster (default: all)")
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--takes", type=int, default=8)
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--stride", type=int, default=STRIDE, help="frames per streamed chunk (default 4)")
    ap.add_argument("--codec-cpu", action="store_true")
    args = ap.parse_args()
    STRIDE = args.stride

    from s2studio.cluster import deployment, require_ray
    from s2studio.engine.pipeline import Pipeline
    from s2studio.server import ServerThread, create_app
    from s2studio.server.runner import bind_socket

    require_ray()
    options = ClusterOptions(model=str(pathlib.Path(args.model).resolve()), device=args.device,
                             threads=args.threads, codec_mode="cpu" if args.codec_cpu else "auto",
                             num_replicas=args.replicas, num_cpus=args.cpus, num_gpus=args.gpus,
                             max_batch=args.max_batch, queue_depth=max(4, args.concurrency),
                             voice_dir=str(ROOT / "build" / "bench-cluster-voices"))
    with bind_socket("127.0.0.1", 0) as s:
        cluster_port = s.getsockname()[1]
    pipeline = Pipeline(options.engine_settings())
    pipeline.load()
    pathlib.Path(options.voice_dir).mkdir(parents=True, exist_ok=True)
    single = ServerThread(create_app(pipeline, options.server_config(options.voice_dir))).start()
    print(f"loading {args.replicas} replica(s) on a local Ray cluster ...", file=sys.stderr)
    deployment.start(options, host="127.0.0.1", port=cluster_port, num_cpus=args.num_cpus)
    try:
        for port in (single.port, cluster_port):  # warm up: first takes compile and cache
            run_load(port, min(args.concurrency, args.takes), args.concurrency, min(args.frames, 8), 10_000)
        audio_per_take = args.frames * FRAME_SAMPLES / SAMPLE_RATE
        print(f"{args.takes} takes x {args.frames} frames ({audio_per_take:.2f} s of audio each, chunks of "
              f"{args.stride} frames), {args.concurrency} in flight, max batch {args.max_batch}, {args.replicas} replica(s)")
        print("| round | target | wall s | sentences/s | audio s/s | per replica: audio s/s | x single | load |")
        print("|---|---|---|---|---|---|---|---|")
        results: list[dict] = []
        for r in range(args.rounds):
            single_s = run_load(single.port, args.takes, args.concurrency, args.frames, 100 * r)
            cluster_s = run_load(cluster_port, args.takes, args.concurrency, args.frames, 100 * r)
            for name, wall, replicas in (("serve", single_s, 1), ("cluster", cluster_s, args.replicas)):
                rate = args.takes * audio_per_take / wall
                ratio = (rate / replicas) / (args.takes * audio_per_take / single_s)
                results.append({"round": r + 1, "target": name, "wall_s": wall, "audio_s_per_s": rate,
                                "per_replica": rate / replicas, "x_single": ratio})
                print(f"| {r + 1} | {name} | {wall:.2f} | {args.takes / wall:.3f} | {rate:.3f} | "
                      f"{rate / replicas:.3f} | {ratio:.2f} | {loadavg()} |", flush=True)
        print(json.dumps({"frames": args.frames, "takes": args.takes, "replicas": args.replicas,
                          "results": results}))
    finally:
        deployment.stop()
        single.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
