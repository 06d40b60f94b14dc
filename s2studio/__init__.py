"""s2studio: a desktop voice-cloning studio for Fish Audio S2 Pro, on a torch port of s2.cpp."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

# Idle OpenMP threads must sleep, not spin. torch and numba each load their own OpenMP runtime
# (two thread pools), and by default an idle worker spins for ~300 000 iterations before it
# sleeps: on a desktop where other programs use the cores, the spinning workers took the CPU
# from the thread doing the work and from those programs, and a frame got 10-20x slower
# (docs/performance.md, "A busy machine"). libgomp reads this when torch/numba load, so it is
# set here, before the engine imports them; a value the user set wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# MKL's GEMMs in strict reproducibility mode: the same bits whatever the thread count (by
# default some shapes, e.g. the codec's 7x96 by 96xL, round differently with 1, 2 or 3
# threads), so a decode gives the same audio on every machine and --threads; AUTO keeps the
# CPU's fastest code path. Read at MKL's first call; a value the user set wins.
_os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
# True when torch was imported before s2studio (a script or notebook): then the setting above
# came too late for torch's pool, and the engine says so once (engine/threads.py).
OPENMP_POLICY_TOO_LATE = "torch" in _sys.modules and _os.environ["OMP_WAIT_POLICY"].upper() == "PASSIVE"
