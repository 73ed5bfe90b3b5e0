# Linear layer, a max pooling over its outputs, a sum over the features and a scale (KernelBench format;
# KernelBench's level2/55_Matmul_MaxPool_Sum_Scale at a smaller size). No pass over the weight makes a
# maximum: the built-in tuner forms the product, takes each window's maximum of it (the bias added
# first) in a pass of its own, then runs the sum and the scale over the pooled rows.
import torch
import torch.nn as nn

batch_size = 64
in_features = 512
out_features = 768
kernel_size = 2
scale_factor = 0.5

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: KernelBench's own is 128 x 32768 x 32768.
KFAB_GPU = {"batch_size": 128, "in_features": 8192, "out_features": 8192}
KFAB_HELDOUT = [{"batch_size": 33, "in_features": 101, "out_features": 96}]
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 2*batch_size*out_features",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 4*out_features + 4*batch_size",
}


class Model(nn.Module):
    """y[i] = 0.5 * sum_j max((x @ W^T + b)[i, 2 j], (x @ W^T + b)[i, 2 j + 1])"""

    def __init__(self, in_features: int, out_features: int, kernel_size: int, scale_factor: float):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.max_pool = nn.MaxPool1d(kernel_size)
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.matmul(x)
        x = self.max_pool(x.unsqueeze(1)).squeeze(1)
        x = torch.sum(x, dim=1)
        return x * self.scale_factor


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, kernel_size, scale_factor]
