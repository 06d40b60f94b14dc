#!/usr/bin/env python3
"""Copy an S2 GGUF, re-typing its 2-D transformer tensors (tests and benchmarks).

The code is ``s2studio.devtools.requantize``; this is its command line:

    python tools/requantize_gguf.py IN.gguf OUT.gguf --type q4_k [--dequantized-out REF.gguf]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from s2studio.devtools.requantize import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
