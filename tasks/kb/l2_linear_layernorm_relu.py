# Linear layer, layer normalisation of its outputs (learned weight and bias), then ReLU (KernelBench format).
import torch
import torch.nn as nn

batch_size = 128
in_features = 256
out_features = 512
eps = 1e-5

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: 137 GFLOP, compute-bound.
KFAB_GPU = {"batch_size": 4096, "in_features": 4096, "out_features": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "in_features": 97, "out_features": 1001}]
# GEMM: 2 per multiply-add; epilogue per output: bias (1), layer norm (7), ReLU (1)
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 9*batch_size*out_features",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 12*out_features + 4*batch_size*out_features",
}
# Pre-normalisation values are ~0.6 in magnitude (nn.Linear's default init): see l2_linear_gelu_scale.py.
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """y = relu(layer_norm(x @ W^T + b) * gamma + beta), normalised over out_features"""

    def __init__(self, in_features: int, out_features: int, eps: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features, eps=eps)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(out_features))
            self.norm.bias.copy_(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.linear(x)))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, eps]
