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
