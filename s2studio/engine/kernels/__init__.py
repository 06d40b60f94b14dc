"""Kernels that compute on GGUF quantized blocks directly (numba; optional at run time)."""
