# 3x3 convolution (valid padding), ReLU, then a learned per-channel bias added (KernelBench format).
import torch
import torch.nn as nn

batch_size = 4
in_channels = 8
out_channels = 16
height = 32
width = 32
kernel_size = 3

KFAB_OP_CLASS = "conv_epilogue"
# Tuning shape on a GPU: 37 GFLOP.
KFAB_GPU = {"batch_size": 16, "in_channels": 64, "out_channels": 128, "height": 128, "width": 128}
KFAB_HELDOUT = [{"batch_size": 3, "in_channels": 5, "out_channels": 7, "height": 33, "width": 19}]
# conv: 2 per multiply-add; epilogue per output: conv bias (1), ReLU (1), channel bias (1)
KFAB_COST = {
    "flops": "2*batch_size*out_channels*(height-kernel_size+1)*(width-kernel_size+1)*in_channels*kernel_size*kernel_size + 3*batch_size*out_channels*(height-kernel_size+1)*(width-kernel_size+1)",
    "bytes": "4*batch_size*in_channels*height*width + 4*out_channels*in_channels*kernel_size*kernel_size + 8*out_channels + 4*batch_size*out_channels*(height-kernel_size+1)*(width-kernel_size+1)",
}
# Sums over in_channels*kernel_size^2 = 576 products on the GPU shape, in any order (direct, im2col, Winograd).
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """y = relu(conv2d(x, W) + b_conv) + b_channel[c]"""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.channel_bias = nn.Parameter(0.1 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)) + self.channel_bias


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
