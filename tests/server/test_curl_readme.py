"""The curl requests of s2.cpp's README (its "HTTP server mode" section), unchanged but for
the port, run against s2studio's server. Where the README pipes into ffplay, the body is
written to a file instead and checked."""

from __future__ import annotations

import io
import shlex
import shutil
import subprocess

import pytest
import soundfile as sf

P512 = '{"max_new_tokens":512,"temperature":0.58,"top_p":0.88,"top_k":40}'
# (arguments after "curl" as in the README, kind of body expected)
README_REQUESTS = [
    ('-X POST http://127.0.0.1:3030/generate --form "text=Hello world" '
     f"--form 'params={P512}' -o output.wav", "wav"),
    ('-X POST http://127.0.0.1:3030/generate --form "reference=@reference.wav" '
     '--form "reference_text=Transcript of the reference." --form "text=Text to synthesize in that voice." '
     f"--form 'params={P512}' -o output.wav", "wav"),
    ('-X POST http://127.0.0.1:3030/generate --form "voice=hope" --form "text=English text using the Hope voice." '
     '--form \'params={"stream":true,"chunked":true,"output_format":"pcm_s16le","segment_sentences":true,'
     '"stream_start_buffer_ms":6000,"max_new_tokens":512}\'', "pcm"),
    ('-X POST http://127.0.0.1:3030/generate --form "text=Hello from the streaming path" '
     '--form \'params={"stream":true,"max_new_tokens":512}\' -o output-streaming.wav', "wav"),
    ('-X POST http://127.0.0.1:3030/generate --form "text=Hello from the live chunked transport" '
     '--form \'params={"stream":true,"chunked":true,"max_new_tokens":512}\' -o output-live.wav', "live-wav"),
    ('-X POST http://127.0.0.1:3030/generate --form "text=Hello from the live PCM transport" '
     '--form \'params={"stream":true,"chunked":true,"output_format":"pcm_s16le","low_latency":true,'
     '"max_new_tokens":512}\'', "pcm"),
    ('-sN -X POST http://127.0.0.1:3030/generate --form "text=Hello from the buffered live PCM transport" '
     '--form \'params={"stream":true,"chunked":true,"output_format":"pcm_s16le","stream_decode_stride_frames":4,'
     '"stream_holdback_frames":16,"stream_start_buffer_ms":4000,"max_new_tokens":512}\'', "pcm"),
    ('-sN -X POST http://127.0.0.1:3030/generate --form "text=Sereias são criaturas mitológicas híbridas, '
     'tradicionalmente representadas com busto feminino humano e cauda de peixe. Originárias de lendas gregas '
     'como seres metade mulher e metade pássaro." --form \'params={"stream":true,"chunked":true,'
     '"output_format":"pcm_s16le","segment_sentences":true,"sentence_pause_ms":180,'
     '"stream_start_buffer_ms":6000,"max_new_tokens":512}\'', "pcm"),
    ('-X POST http://127.0.0.1:3030/generate --form "reference_audio=@reference.wav" '
     '--form "ref_text=Transcript of the reference." --form "text=Text to synthesize in that voice." '
     "-o output.wav", "wav"),
    # The README's other spelling of a voice: a .s2voice path relative to the server's folder.
    ('-X POST http://127.0.0.1:3030/generate --form "voice=voices/hope.s2voice" --form "text=Hi." -o output.wav',
     "wav"),
]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("command,kind", README_REQUESTS, ids=[f"readme-{i}" for i in range(len(README_REQUESTS))])
def test_readme_curl_request(command, kind, start_server, voice_dir, api, monkeypatch, tmp_path):
    # Tokens are capped server-side so the tiny model's takes stay short; the request is unchanged.
    server = start_server(max_new_tokens_limit=10)
    work = voice_dir.parent
    shutil.copy(api.reference, work / "reference.wav")
    monkeypatch.chdir(work)  # curl's @reference.wav and the server's "voices/..." are relative to it
    args = shlex.split(command.replace("127.0.0.1:3030", f"127.0.0.1:{server.port}"))
    out = tmp_path / "body.bin"
    if "-o" in args:
        args[args.index("-o") + 1] = str(out)
    else:
        args += ["-o", str(out)]  # instead of the README's "| ffplay ..."
    done = subprocess.run(["curl", "-sS", "--max-time", "60", "-w", "%{http_code}", *args],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "200", out.read_bytes()[:300]
    body = out.read_bytes()
    if kind == "pcm":
        assert len(body) > 0 and len(body) % 2 == 0
        assert not body.startswith(b"RIFF")
    else:
        assert body.startswith(b"RIFF")
        audio, rate = sf.read(io.BytesIO(body))
        assert rate == 44100 and len(audio) > 0
