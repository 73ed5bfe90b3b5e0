# Group normalisation of an NCHW feature map with per-channel affine parameters (KernelBench format).
import torch
import torch.nn as nn

batch_size = 8
channels = 64
num_groups = 8
height = 32
width = 32
eps = 1e-5

KFAB_OP_CLASS = "group_norm"
# Tuning shape on a GPU: 32M elements, memory-bound.
KFAB_GPU = {"batch_size": 32, "channels": 256, "num_groups": 32, "height": 64, "width": 64}
KFAB_HELDOUT = [{"batch_size": 3, "channels": 20, "num_groups": 5, "height": 13, "width": 11}]
KFAB_FORBIDDEN = ["torch.group_norm", "torch.nn.functional.group_norm", "aten.group_norm", "aten.native_group_norm"]
# per element: mean sum (1), x - mean (1), square and sum (2), * rstd (1), * weight (1), + bias (1)
KFAB_COST = {
    "flops": "7*batch_size*channels*height*width",
    "bytes": "8*batch_size*channels*height*width + 8*channels",
}
# Statistics run over (channels/num_groups)*height*width values (32768 on the GPU shape).
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """y = (x - mean_g) / sqrt(var_g + eps) * weight[c] + bias[c], statistics per (sample, group of channels)"""

    def __init__(self, num_groups: int, channels: int, eps: float):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels, eps=eps)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(channels))
            self.norm.bias.copy_(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels, eps]
