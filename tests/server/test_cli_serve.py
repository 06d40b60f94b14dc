"""``s2studio serve``: flags, defaults, and the warning for non-loopback hosts."""

from __future__ import annotations

import pytest

from s2studio.cli import build_parser


def test_serve_defaults():
    args = build_parser().parse_args(["serve", "-m", "model.gguf"])
    assert (args.host, args.port, args.queue_depth, args.api_key, args.max_upload_mb) == ("127.0.0.1", 3030, 4, None,
                                                                                          50.0)
    assert args.handler.__module__ == "s2studio.cli.serve"


@pytest.mark.parametrize("flags", [["--queue-depth", "-1"], ["--max-upload-mb", "0"]])
def test_serve_rejects_bad_limits(flags, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", *flags])


def test_public_host_warns_before_loading(tmp_path, capsys):
    from s2studio.cli import main

    # The model does not exist, so the command stops at loading, after its warning.
    code = main(["serve", "-m", str(tmp_path / "missing.gguf"), "--host", "0.0.0.0", "--voice-dir", str(tmp_path),
                 "-threads", "1"])  # loading sets torch's process-wide thread count
    err = capsys.readouterr().err
    assert "warning: serving on 0.0.0.0" in err and "no --api-key" in err
    assert code == 2


def test_busy_port_is_one_line_before_loading(tmp_path):
    import pathlib
    import socket
    import subprocess
    import sys

    model = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden" / "clone_f32_qknorm" / "model.gguf"
    with socket.socket() as taken:  # another server on the port (no SO_REUSEADDR, listening)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "s2studio", "serve", "-m", str(model), "--codec-cpu", "-threads", "1",
             "-P", str(port), "--voice-dir", str(tmp_path / "voices")],
            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no "loading ...", no "serving on", no traceback
    assert f"127.0.0.1:{port}" in lines[0] and "already in use" in lines[0]


@pytest.mark.parametrize("flags", [["--port", "70000"], ["--max-connections", "0"], ["--header-timeout", "0"],
                                   ["--body-timeout", "-1"], ["--max-text-chars", "0"]])
def test_serve_rejects_bad_server_limits(flags):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", *flags])


def test_browser_flags_are_lists():
    args = build_parser().parse_args(["serve", "--allowed-hosts", "studio.lan, box.local",
                                      "--allowed-origins", "http://localhost:5173"])
    assert args.allowed_hosts == ("studio.lan", "box.local")
    assert args.allowed_origins == ("http://localhost:5173",)


def test_serve_help_lists_cuda_graphs():
    """The server's engine takes ``--cuda-graphs`` from its command line (HTTP clients cannot set it)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "s2studio", "serve", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "--cuda-graphs {auto,on,off,eager,compile}" in r.stdout and "CUDA" in r.stdout


@pytest.mark.parametrize("flags, warns", [(["--cuda-graphs", "on"], True),
                                          (["--cuda-graphs", "on", "--max-batch", "1"], False), ([], False)])
def test_cuda_graphs_with_batching_warns_before_loading(tmp_path, capsys, flags, warns):
    """Batched takes run the dynamic steps: asking for graphs with --max-batch > 1 says so."""
    from s2studio.cli import main

    code = main(["serve", "-m", str(tmp_path / "missing.gguf"), "--voice-dir", str(tmp_path), "-threads", "1",
                 "-P", "0", *flags])
    err = capsys.readouterr().err
    assert code == 2  # the model does not exist: the command stops at loading, after its warnings
    assert ("warning: --cuda-graphs on applies to takes decoded one at a time" in err) == warns, err
