# Linear layer (with bias), exact GELU, then a constant scale (KernelBench format).
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 128
in_features = 256
out_features = 256
scale = 0.5

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: 137 GFLOP, compute-bound.
KFAB_GPU = {"batch_size": 4096, "in_features": 4096, "out_features": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "in_features": 1001, "out_features": 97}]
# GEMM: 2 per multiply-add; epilogue per output: bias (1), GELU (5), scale (1)
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 7*batch_size*out_features",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 4*out_features + 4*batch_size*out_features",
}
# nn.Linear's default init keeps the pre-activations ~0.6 in magnitude whatever in_features is: an f32
# GEMM over in_features = 4096 is off by ~1e-5; a reduced-precision (tf32/bf16) one by more than 1e-4.
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """y = gelu(x @ W^T + b) * scale"""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x)) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
