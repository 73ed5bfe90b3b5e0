# Linear layer, BatchNorm1d with the batch's statistics (the Model as constructed: training mode), then exact GELU (KernelBench format).
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 128
in_features = 256
out_features = 256

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: 137 GFLOP, compute-bound.
KFAB_GPU = {"batch_size": 4096, "in_features": 4096, "out_features": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "in_features": 1001, "out_features": 97}]
# GEMM: 2 per multiply-add; epilogue per output: bias (1), the batch's mean and variance (3), the
# normalisation and affine (4), GELU (5)
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 13*batch_size*out_features",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 20*out_features + 4*batch_size*out_features",
}
# The normalised values are ~1 in magnitude: an f32 GEMM over in_features = 4096 is off by ~1e-5.
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """y = gelu(batch_norm(x @ W^T + b)), the mean and the (biased) variance over the batch, per feature"""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)
        with torch.no_grad():  # an affine transform that is not the identity
            self.bn.weight.copy_(1.0 + 0.1 * torch.randn(out_features))
            self.bn.bias.copy_(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.bn(self.linear(x)))


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
