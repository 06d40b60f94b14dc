"""The codec's decode does not depend on the thread count: the same codes give the same bytes
with 1, 2 and 3 threads (each in its own process, as a user's --threads would). Before the
transposed convs ran as convolutions (layers.CausalTransConv._polyphase) and MKL's GEMMs in
strict mode (MKL_CBWR, s2studio/__init__.py), oneDNN's transposed conv and some small GEMMs
rounded differently per thread count: three different waveforms ~1e-7 apart."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import GOLDEN

CODE = r"""
import hashlib, sys
import s2studio
import numpy as np, torch
from s2studio.engine.codec import Codec
from s2studio.engine.threads import set_threads

set_threads(1)  # numba's layer up first (it resets the OpenMP count), then torch's own count
torch.set_num_threads(int(sys.argv[2]))  # also more threads than this machine's cores
codec = Codec.from_gguf(sys.argv[1])
rng = np.random.default_rng(3)
codes = np.stack([rng.integers(0, n, size=40) for n in codec.cfg.codebook_sizes()]).astype(np.int32)
streamed = codec.decode(codes)  # 16-frame chunks on CPU
one_shot = codec.decode_tensor(codec.clamp_codes(codes)).numpy()  # long inputs: the conv paths
assert streamed.shape == one_shot.shape and np.abs(streamed).max() > 0
print(torch.get_num_threads(), hashlib.sha256(streamed.tobytes() + one_shot.tobytes()).hexdigest())
"""


def test_decode_is_bit_identical_with_1_2_and_3_threads():
    model = GOLDEN / "codec_roundtrip" / "model.gguf"
    digests = {}
    for threads in (1, 2, 3):
        res = subprocess.run([sys.executable, "-c", CODE, str(model), str(threads)], capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, res.stderr
        got_threads, digest = res.stdout.split()
        assert int(got_threads) == threads
        digests[threads] = digest
    assert len(set(digests.values())) == 1, digests
