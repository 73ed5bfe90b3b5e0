# 3x3 convolution (valid padding), group normalisation of its output channels, then tanh (KernelBench format).
import torch
import torch.nn as nn

batch_size = 4
in_channels = 8
out_channels = 32
num_groups = 8
height = 32
width = 32
kernel_size = 3
eps = 1e-5

KFAB_OP_CLASS = "conv_epilogue"
# Tuning shape on a GPU: 37 GFLOP.
KFAB_GPU = {"batch_size": 16, "in_channels": 64, "out_channels": 128, "num_groups": 16, "height": 128, "width": 128}
KFAB_HELDOUT = [
    {"batch_size": 3, "in_channels": 5, "out_channels": 12, "num_groups": 4, "height": 33, "width": 19},
]
# conv: 2 per multiply-add; epilogue per output: conv bias (1), group norm (7), tanh (1)
KFAB_COST = {
    "flops": "2*batch_size*out_channels*(height-kernel_size+1)*(width-kernel_size+1)*in_channels*kernel_size*kernel_size + 9*batch_size*out_channels*(height-kernel_size+1)*(width-kernel_size+1)",
    "bytes": "4*batch_size*in_channels*height*width + 4*out_channels*in_channels*kernel_size*kernel_size + 12*out_channels + 4*batch_size*out_channels*(height-kernel_size+1)*(width-kernel_size+1)",
}
# Convolution sums over 576 products and group statistics over ~126000 values on the GPU shape.
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """y = tanh(group_norm(conv2d(x, W) + b, num_groups) * gamma[c] + beta[c])"""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, num_groups: int, eps: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(num_groups, out_channels, eps=eps)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(out_channels))
            self.norm.bias.copy_(0.1 * torch.randn(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups, eps]
