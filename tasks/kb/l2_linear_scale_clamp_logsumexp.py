# Linear layer, constant scale, clamp to a range, then log-sum-exp over the output features (KernelBench format).
import torch
import torch.nn as nn

batch_size = 128
in_features = 256
out_features = 512
scale = 2.0
clamp_min = -2.5
clamp_max = 2.5

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: 137 GFLOP, compute-bound.
KFAB_GPU = {"batch_size": 4096, "in_features": 4096, "out_features": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "in_features": 1001, "out_features": 97}]
# GEMM: 2 per multiply-add; epilogue per output: bias (1), scale (1), clamp (2), max (1), exp (1), sum (1)
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 7*batch_size*out_features",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 4*out_features + 4*batch_size",
}
# Scaled pre-activations are ~1.2 in magnitude (about 3% of them clamped); see l2_linear_gelu_scale.py.
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """h = clamp((x @ W^T + b) * scale, clamp_min, clamp_max); y[i] = log(sum_j exp(h[i, j]))"""

    def __init__(self, in_features: int, out_features: int, scale: float, clamp_min: float, clamp_max: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.clamp(self.linear(x) * self.scale, self.clamp_min, self.clamp_max)
        return torch.logsumexp(h, dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale, clamp_min, clamp_max]
