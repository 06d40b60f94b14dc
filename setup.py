"""Build of the optional C kernels; everything else is in pyproject.toml.

``_qdot`` (integer-dot-product K-quant and Q8_0 GEMV rows) is ``optional=True``: where no C compiler
exists the install still succeeds and the engine uses its numba kernels (one log line says so).
"""

import sys

from setuptools import Extension, setup

if sys.platform == "win32":
    _ARGS = ["/O2"]
else:
    # -O3: the block unpacking loops are vectorized by the compiler; no -march: the file picks
    # AVX-512/AVX2 per function and dispatches at run time, so one wheel runs everywhere.
    _ARGS = ["-O3", "-std=c99", "-fno-strict-aliasing"]

setup(ext_modules=[Extension("s2studio.engine.kernels._qdot", ["s2studio/engine/kernels/_qdot.c"],
                             depends=["s2studio/engine/kernels/_attend.c", "s2studio/engine/kernels/_glue.c",
                                      "s2studio/engine/kernels/_pool.c"],
                             extra_compile_args=_ARGS, optional=True)])
