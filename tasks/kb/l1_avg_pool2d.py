# 2-D average pooling of an NCHW tensor with padding, as KernelBench's level1/45 (KernelBench format).
import torch
import torch.nn as nn

batch_size = 4
channels = 8
height = 64
width = 80
kernel_size = 3
stride = 2
padding = 1

KFAB_OP_CLASS = "pool"
# Tuning shape on a GPU: 16 x 64 x 1024 x 1024 (4 GiB in), memory-bound.
KFAB_GPU = {"batch_size": 16, "channels": 64, "height": 1024, "width": 1024}
KFAB_HELDOUT = [{"batch_size": 3, "channels": 5, "height": 37, "width": 29}]
KFAB_FORBIDDEN = ["torch.nn.functional.avg_pool2d", "aten.avg_pool2d", "torch._C._nn.avg_pool2d"]
KFAB_COST = {"flops": "batch_size*channels*height*width", "bytes": "4*batch_size*channels*height*width + batch_size*channels*height*width"}


class Model(nn.Module):
    """y = avg_pool2d(x, kernel_size, stride, padding): windows overlap, and those at the border count
    the zero padding in their divisor (count_include_pad, torch's default)."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
