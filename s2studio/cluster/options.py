"""What one cluster deployment is made of: the model, the replicas and the server's guards.

``ClusterOptions`` is filled by ``s2studio cluster serve`` (its flags) or by the ``args`` of a Ray
Serve config file (``serve run``/``serve deploy``, see ``resources/cluster/serve_config.yaml``),
and checked here once: every number has a range, every unknown key is an error naming it. No Ray
and no torch in this module, so the CLI's --help and the checks work without the extra.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from s2studio.errors import InputError

MAX_REPLICAS = 512
MAX_CPUS_PER_REPLICA = 256
MAX_GPUS_PER_REPLICA = 16
MAX_QUEUED_REQUESTS = 100_000
DEFAULT_MAX_QUEUED_REQUESTS = 200
DEFAULT_HTTP_PORT = 8000  # Ray Serve's own default
# A /health request a replica accepts beside its synthesis slots, so a busy replica still answers
# the status probe (and `s2studio cluster status`) instead of queueing it behind takes.
PROBE_SLOTS = 1
# Places the replica's own queue holds beyond what Ray may send it at once: Ray counts a request
# finished as its last bytes leave, a moment before the server's worker lets go of its place, and
# the next request must not meet the server's 503 in that moment.
FINISH_SLACK = 1


def _check_range(name: str, value, low, high, integer: bool = True):
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "a whole number" if integer else "a number"
        raise InputError(f"cluster option {name} must be {what} in {low}..{high}, not {value!r}.")
    if not low <= value <= high:
        raise InputError(f"cluster option {name} must be in {low}..{high}, not {value}.")
    return value


@dataclass(frozen=True)
class ClusterOptions:
    # The model: a path every node can read (a shared disk, or the same path on every machine).
    model: str
    tokenizer: str | None = None
    tokenizer_mode: str = "hf"
    device: str = "cpu"  # of each replica: cpu, cuda (the GPU Ray gives it), mps
    gpu_layers: int = -1
    dtype: str = "auto"
    threads: int = 0  # CPU threads per replica; 0 = the CPUs Ray reserved for it (num_cpus)
    codec_mode: str = "auto"
    cuda_graphs: str = "auto"
    voice_dir: str | None = None  # the folder of .s2voice voices on every node (None: the studio's)
    # The server of each replica (as ``s2studio serve``'s flags).
    max_batch: int = 4
    queue_depth: int = 4
    api_key: str | None = field(default=None, repr=False)
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    max_text_chars: int = 10_000
    max_upload_mb: float = 50.0
    # The replicas: a fixed number, or autoscaling between min and max on ongoing requests.
    num_replicas: int = 1
    autoscale: bool = False
    min_replicas: int = 1
    max_replicas: int = 4
    target_ongoing_requests: float | None = None  # None: max_batch (a replica's batch kept full)
    num_cpus: float = 1.0  # per replica
    num_gpus: float = 0.0  # per replica
    # Requests the proxies hold for a deployment whose replicas are all full; beyond that 503.
    max_queued_requests: int = DEFAULT_MAX_QUEUED_REQUESTS

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise InputError("cluster option model must be the path of the GGUF file on every node.")
        _check_range("gpu_layers", self.gpu_layers, -1, 10_000)
        _check_range("threads", self.threads, 0, 4096)
        from s2studio.server.config import MAX_BATCH

        _check_range("max_batch", self.max_batch, 1, MAX_BATCH)
        _check_range("queue_depth", self.queue_depth, 0, 10_000)
        _check_range("max_text_chars", self.max_text_chars, 1, 100_000)
        _check_range("max_upload_mb", self.max_upload_mb, 0.001, 10_000, integer=False)
        _check_range("num_replicas", self.num_replicas, 1, MAX_REPLICAS)
        _check_range("min_replicas", self.min_replicas, 0, MAX_REPLICAS)
        _check_range("max_replicas", self.max_replicas, 1, MAX_REPLICAS)
        if self.min_replicas > self.max_replicas:
            raise InputError(f"cluster option min_replicas ({self.min_replicas}) is more than max_replicas "
                             f"({self.max_replicas}).")
        if self.target_ongoing_requests is not None:
            _check_range("target_ongoing_requests", self.target_ongoing_requests, 0.1, 10_000, integer=False)
        _check_range("num_cpus", self.num_cpus, 0, MAX_CPUS_PER_REPLICA, integer=False)
        _check_range("num_gpus", self.num_gpus, 0, MAX_GPUS_PER_REPLICA, integer=False)
        _check_range("max_queued_requests", self.max_queued_requests, 1, MAX_QUEUED_REQUESTS)
        if self.api_key is not None and not self.api_key:
            raise InputError("cluster option api_key is empty; leave it out for no key.")
        for name in ("allowed_hosts", "allowed_origins"):
            value = getattr(self, name)
            if isinstance(value, str):  # "a,b" as the CLI spells it
                value = tuple(v.strip() for v in value.split(",") if v.strip())
            object.__setattr__(self, name, tuple(value))
        # The words are checked here, on the machine that deploys, not later on every replica
        # (engine.modes is torch-free: a driver without torch can deploy).
        from s2studio.engine.modes import CodecMode, CudaGraphs, TokenizerMode, WeightDtype

        for name, mode in (("tokenizer_mode", TokenizerMode), ("dtype", WeightDtype), ("codec_mode", CodecMode),
                           ("cuda_graphs", CudaGraphs)):
            object.__setattr__(self, name, mode.parse(getattr(self, name)).value)

    @classmethod
    def from_mapping(cls, args: dict) -> "ClusterOptions":
        """From a Serve config file's ``args`` (unknown keys are an error naming them). The API key
        may come from the replica's environment (``S2STUDIO_API_KEY``, e.g. a Kubernetes secret)
        instead of the file."""
        if not isinstance(args, dict):
            raise InputError("the s2studio application's args must be a mapping of option names to values.")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(args) - known)
        if unknown:
            raise InputError(f"unknown s2studio cluster option(s): {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))}).")
        values = _typed(args)
        if values.get("api_key") is None and os.environ.get("S2STUDIO_API_KEY"):
            values["api_key"] = os.environ["S2STUDIO_API_KEY"]
        return cls(**values)

    @property
    def replica_threads(self) -> int:
        """The CPU threads of one replica: the flag, else the CPUs Ray reserved for it (several
        replicas on one machine must not each take every core)."""
        if self.threads:
            return self.threads
        return max(1, int(self.num_cpus))

    def engine_settings(self):
        from s2studio.engine.pipeline import EngineSettings

        return EngineSettings(model_path=self.model, tokenizer_path=self.tokenizer, tokenizer_mode=self.tokenizer_mode,
                              device=self.device, gpu_layers=self.gpu_layers, dtype=self.dtype,
                              threads=self.replica_threads, codec_mode=self.codec_mode, cuda_graphs=self.cuda_graphs)

    def server_config(self, voice_dir: str):
        from s2studio.server.config import ServerConfig

        # Ray holds what waits beyond max_ongoing_requests at the proxy; the replica's queue takes
        # everything Ray may send it (the probe slot may carry a take too) and the finish slack.
        return ServerConfig(voice_dir=voice_dir, queue_depth=self.queue_depth + PROBE_SLOTS + FINISH_SLACK,
                            max_batch=self.max_batch,
                            api_key=self.api_key, max_upload_bytes=int(self.max_upload_mb * 1024 * 1024),
                            max_text_chars=self.max_text_chars, allowed_hosts=self.allowed_hosts,
                            allowed_origins=self.allowed_origins)

    @property
    def max_ongoing_requests(self) -> int:
        """What Ray sends one replica at once: its batch, its queue and the probe slot. Ray holds
        the rest at the proxy until a replica has room (``max_queued_requests``, then 503)."""
        return self.max_batch + self.queue_depth + PROBE_SLOTS

    def deployment_options(self) -> dict:
        """The Ray Serve deployment options these stand for."""
        options = {"max_ongoing_requests": self.max_ongoing_requests,
                   "max_queued_requests": self.max_queued_requests,
                   "ray_actor_options": {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus},
                   # Loading a full-size model takes minutes on a slow disk.
                   "health_check_timeout_s": 60, "graceful_shutdown_timeout_s": 30}
        if self.autoscale:
            options["autoscaling_config"] = {
                "min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
                "target_ongoing_requests": self.target_ongoing_requests or float(self.max_batch)}
        else:
            options["num_replicas"] = self.num_replicas
        return options


TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _typed(args: dict) -> dict:
    """``serve run s2studio.cluster.deployment:app_builder max_batch=4`` passes "4": a string for a
    number or a switch becomes the option's type (a word that is neither is an error naming it)."""
    kinds = {f.name: type(f.default) for f in fields(ClusterOptions)}
    kinds["target_ongoing_requests"] = float
    out = {}
    for name, value in args.items():
        kind = kinds.get(name)
        if isinstance(value, str) and kind in (int, float, bool):
            text = value.strip().lower()
            try:
                if kind is bool:
                    if text not in TRUE_WORDS + FALSE_WORDS:
                        raise ValueError
                    value = text in TRUE_WORDS
                else:
                    value = kind(text)
            except ValueError:
                raise InputError(f"cluster option {name} must be {'true or false' if kind is bool else 'a number'}, "
                                 f"not {value!r}.") from None
        out[name] = value
    return out
