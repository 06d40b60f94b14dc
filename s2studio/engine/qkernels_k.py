"""K-quant CPU kernels (Q4_K, Q5_K, Q6_K ...), registered into ``qkernels.KERNELS``.

Filled in by the K-quant work; importing it must always succeed (no numba → registers nothing).
"""
