# Linear layer, GroupNorm over groups of its output features, then Hardtanh (KernelBench format).
import torch
import torch.nn as nn

batch_size = 128
in_features = 256
out_features = 512
num_groups = 32

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: 137 GFLOP, compute-bound.
KFAB_GPU = {"batch_size": 4096, "in_features": 4096, "out_features": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "in_features": 1001, "out_features": 96}]
# GEMM: 2 per multiply-add; epilogue per output: bias (1), the group's mean and variance (3), the
# normalisation and affine (4), Hardtanh (2)
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 10*batch_size*out_features",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 12*out_features + 4*batch_size*out_features",
}
# The normalised values are ~1 in magnitude: an f32 GEMM over in_features = 4096 is off by ~1e-5.
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """y = hardtanh(group_norm(x @ W^T + b)), each of num_groups groups of features normalised per row"""

    def __init__(self, in_features: int, out_features: int, num_groups: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.GroupNorm(num_groups, out_features)
        with torch.no_grad():  # an affine transform that is not the identity
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(out_features))
            self.norm.bias.copy_(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(self.norm(self.linear(x)), -2.0, 2.0)


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups]
