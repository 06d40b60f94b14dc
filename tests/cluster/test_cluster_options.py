"""The cluster's options and example configs, and ``s2studio cluster`` without the extra. No Ray
cluster is started here (the Serve config schema check runs only where Ray is installed)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from s2studio.cluster.options import ClusterOptions
from s2studio.errors import InputError

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "cluster"


def _example_args() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with the cluster extra")
    return dict(yaml.safe_load((EXAMPLES / "serve_config.yaml").read_text())["applications"][0]["args"])


def test_the_example_config_is_valid_options():
    options = ClusterOptions.from_mapping(_example_args())
    deployment = options.deployment_options()
    assert deployment["ray_actor_options"] == {"num_cpus": 2, "num_gpus": 1}
    assert deployment["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 4.0}
    # Ray sends a replica its batch, its queue and room for the status probe, no more; the
    # replica's own queue takes all of that and one more, so nothing Ray sends meets its 503.
    assert deployment["max_ongoing_requests"] == 4 + 4 + 1
    config = options.server_config("voices")
    assert config.max_batch + config.queue_depth == deployment["max_ongoing_requests"] + 1
    assert options.engine_settings().device == "cuda"


def test_the_example_configs_are_valid_serve_configs():
    pytest.importorskip("ray.serve", reason="the cluster extra (ray[serve]) is not installed")
    import yaml
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(yaml.safe_load((EXAMPLES / "serve_config.yaml").read_text()))
    service = yaml.safe_load((EXAMPLES / "rayservice.yaml").read_text())
    assert service["kind"] == "RayService"
    serve_config = yaml.safe_load(service["spec"]["serveConfigV2"])
    ServeDeploySchema.model_validate(serve_config)
    ClusterOptions.from_mapping(serve_config["applications"][0]["args"])


def test_serve_run_strings_become_typed_options():
    # `serve run s2studio.cluster.deployment:app_builder model=m max_batch=2 autoscale=true ...`
    options = ClusterOptions.from_mapping({"model": "m.gguf", "max_batch": "2", "autoscale": "true",
                                           "num_gpus": "0.5", "target_ongoing_requests": "3",
                                           "allowed_hosts": "a.example, b.example"})
    assert (options.max_batch, options.autoscale, options.num_gpus) == (2, True, 0.5)
    assert options.allowed_hosts == ("a.example", "b.example")
    assert options.deployment_options()["autoscaling_config"]["target_ongoing_requests"] == 3.0


@pytest.mark.parametrize("args, message", [
    ({"model": "m", "replicas": 2}, r"unknown s2studio cluster option\(s\): replicas"),
    ({"model": "m", "num_replicas": 0}, r"num_replicas must be in 1\.\.512, not 0"),
    ({"model": "m", "max_batch": 9}, r"max_batch must be in 1\.\.8"),
    ({"model": "m", "num_gpus": -1}, r"num_gpus must be in 0\.\.16"),
    ({"model": "m", "min_replicas": 5, "max_replicas": 2}, "min_replicas .5. is more than max_replicas .2."),
    ({"model": "m", "max_batch": "four"}, "max_batch must be a number, not 'four'"),
    ({"model": "m", "autoscale": "maybe"}, "autoscale must be true or false"),
    ({"model": "m", "codec_mode": "fast"}, "Unknown codec mode 'fast'"),
    ({"model": "m", "api_key": ""}, "api_key is empty"),
    ({"model": ""}, "model must be the path"),
    ({"model": "m", "max_queued_requests": 0}, r"max_queued_requests must be in 1\.\.100000"),
])
def test_bad_options_are_one_clear_error(args, message):
    with pytest.raises(InputError, match=message):
        ClusterOptions.from_mapping(args)


def test_the_api_key_can_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("S2STUDIO_API_KEY", "from-env")
    assert ClusterOptions.from_mapping({"model": "m"}).api_key == "from-env"
    assert ClusterOptions.from_mapping({"model": "m", "api_key": "file"}).api_key == "file"
    assert "from-env" not in repr(ClusterOptions.from_mapping({"model": "m"}))  # a password stays out of logs


def test_replica_threads_follow_the_cpus_ray_reserves():
    assert ClusterOptions(model="m", num_cpus=3).engine_settings().threads == 3
    assert ClusterOptions(model="m", num_cpus=0.5).engine_settings().threads == 1
    assert ClusterOptions(model="m", num_cpus=3, threads=2).engine_settings().threads == 2


@pytest.mark.parametrize("argv", [["cluster", "status"], ["cluster", "serve", "-m", "model.gguf"]])
def test_without_the_extra_cluster_says_what_to_install(argv):
    code = ("import sys; sys.modules['ray'] = None\n"  # as if Ray were not installed
            "from s2studio.cli import main\n"
            f"sys.exit(main({argv!r}))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: Ray Serve is not installed; install the cluster extra: pip install 's2studio[cluster]'"]
    assert result.stdout == ""


def test_the_package_imports_no_ray_until_used():
    code = ("import sys; import s2studio.cluster, s2studio.cluster.options, s2studio.cli.cluster\n"
            "import s2studio.cli; s2studio.cli.build_parser()\n"
            "assert 'ray' not in sys.modules, 'ray imported'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
