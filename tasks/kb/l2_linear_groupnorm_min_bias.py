# A Linear layer, a GroupNorm over its outputs, the minimum over all of them, plus a bias of shape
# [1, N, 1, 1] (KernelBench format; KernelBench's level2/75_Gemm_GroupNorm_Min_BiasAdd at a smaller
# size). The [M, 1] minima plus that bias broadcast to [1, N, M, 1]: the built-in tuner runs a plan of
# three programs, the Linear with the GroupNorm (its rows the groups) into a buffer, each row's minimum,
# then the broadcast sum over [N, M].
import torch
import torch.nn as nn

batch_size = 64
in_features = 192
out_features = 256
num_groups = 16
bias_shape = (1, out_features, 1, 1)

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: KernelBench's own is 1024 x 8192 -> 8192, 512 groups.
KFAB_GPU = {"batch_size": 1024, "in_features": 4096, "out_features": 8192, "num_groups": 512}
KFAB_HELDOUT = [{"batch_size": 29, "in_features": 120, "out_features": 96, "num_groups": 16}]
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 10*batch_size*out_features",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 16*out_features + 4*batch_size*out_features",
}


class Model(nn.Module):
    """y[0, c, i, 0] = min_j GroupNorm(x W^T + b)[i, j] + bias[0, c, 0, 0]"""

    def __init__(self, in_features: int, out_features: int, num_groups: int, bias_shape: tuple):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.group_norm(self.gemm(x))
        x = torch.min(x, dim=1, keepdim=True)[0]
        return x + self.bias


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups, bias_shape]
