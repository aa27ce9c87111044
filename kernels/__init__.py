"""Triton kernels (decode attention, KV write, W4A16 GEMM, page-integrity check), their torch references,
the Hopper compile check and the timing half of the profiler.

Submodules import torch/triton; this package itself imports nothing heavy, so the simulator can plan
without either installed.
"""
