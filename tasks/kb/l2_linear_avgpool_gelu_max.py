# Linear layer, an average pooling over its outputs, GELU, a scale, a max over the features (KernelBench
# format; KernelBench's level2/98_Matmul_AvgPool_GELU_Scale_Max at a smaller size). The pooling averages
# the product's columns in windows: the built-in tuner averages the weight's rows (and the bias) first and
# multiplies by those, a product pool_kernel_size times narrower.
import torch
import torch.nn as nn

batch_size = 128
in_features = 256
out_features = 512
pool_kernel_size = 16
scale_factor = 2.0

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: KernelBench's own (1024 x 8192 x 8192 before the pooling).
KFAB_GPU = {"batch_size": 1024, "in_features": 8192, "out_features": 8192}
KFAB_HELDOUT = [{"batch_size": 33, "in_features": 101, "out_features": 96}]
# As the Model computes it: the GEMM, then the pooling, GELU, scale and max
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 2*batch_size*out_features",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 4*out_features + 4*batch_size",
}
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """y[i] = max_j 2 * gelu(mean_{t < 16} (x @ W^T + b)[i, 16 j + t])"""

    def __init__(self, in_features: int, out_features: int, pool_kernel_size: int, scale_factor: float):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.avg_pool = nn.AvgPool1d(kernel_size=pool_kernel_size)
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.matmul(x)
        x = self.avg_pool(x.unsqueeze(1)).squeeze(1)
        x = torch.nn.functional.gelu(x)
        x = x * self.scale_factor
        return torch.max(x, dim=1).values


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, pool_kernel_size, scale_factor]
