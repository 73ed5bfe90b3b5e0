# Linear layer, a divide, a sum over the output features, a scale (KernelBench format; KernelBench's
# level2/14_Gemm_Divide_Sum_Scaling with a bias). Only the product's row sums are read: the built-in
# tuner's first cuda point never forms the product (the weight's column sums, then a matrix-vector product).
import torch
import torch.nn as nn

batch_size = 128
in_features = 512
out_features = 256
scaling_factor = 1.5

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: KernelBench's own (1024 x 8192 x 8192, 137 GFLOP as a GEMM).
KFAB_GPU = {"batch_size": 1024, "in_features": 8192, "out_features": 8192}
KFAB_HELDOUT = [{"batch_size": 33, "in_features": 1001, "out_features": 97}]
# As a GEMM: 2 per multiply-add; the epilogue per output: bias, divide, sum (3), then the scale per row
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 3*batch_size*out_features + batch_size",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 4*out_features + 4*batch_size",
}
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """y[i] = 1.5 * sum_j (x @ W^T + b)[i, j] / 2"""

    def __init__(self, in_features: int, out_features: int, scaling_factor: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x) / 2
        x = torch.sum(x, dim=1, keepdim=True)
        return x * self.scaling_factor


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
