# Linear layer, swish (x * sigmoid(x)), then a sum over the output features (KernelBench format).
import torch
import torch.nn as nn

batch_size = 128
in_features = 256
out_features = 256

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: 137 GFLOP, compute-bound.
KFAB_GPU = {"batch_size": 4096, "in_features": 4096, "out_features": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "in_features": 1001, "out_features": 97}]
# GEMM: 2 per multiply-add; epilogue per output: bias (1), sigmoid (3), multiply (1), sum (1)
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 6*batch_size*out_features",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 4*out_features + 4*batch_size",
}
# Pre-activations are ~0.6 in magnitude (nn.Linear's default init); the row sums are ~0.08*out_features.
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """h = x @ W^T + b; y[i] = sum_j h[i, j] * sigmoid(h[i, j])"""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)
        return (h * torch.sigmoid(h)).sum(dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
