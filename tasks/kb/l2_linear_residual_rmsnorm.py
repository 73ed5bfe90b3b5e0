# Square linear layer with a residual connection, then RMS normalisation with a learned gain (KernelBench format).
import torch
import torch.nn as nn

batch_size = 128
features = 256
eps = 1e-6

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: 137 GFLOP, compute-bound.
KFAB_GPU = {"batch_size": 4096, "features": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "features": 1001}]
# GEMM: 2 per multiply-add; epilogue per output: bias (1), residual (1), RMS norm (4)
KFAB_COST = {
    "flops": "2*batch_size*features*features + 6*batch_size*features",
    "bytes": "8*batch_size*features + 4*features*features + 8*features",
}
# Pre-normalisation values are ~1 in magnitude: see l2_linear_gelu_scale.py.
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """h = x @ W^T + b + x; y = h / sqrt(mean(h^2, -1) + eps) * weight"""

    def __init__(self, features: int, eps: float):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x) + x
        return h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, eps]
