# 1-D max pooling with padding and dilation, as KernelBench's level1/41 at a small size (KernelBench format).
import torch
import torch.nn as nn

batch_size = 8
features = 16
sequence_length = 4000
kernel_size = 5
stride = 2
padding = 2
dilation = 2

KFAB_OP_CLASS = "pool"
# Tuning shape on a GPU: 64 x 192 x 65536 (3 GiB in), memory-bound.
KFAB_GPU = {"batch_size": 64, "features": 192, "sequence_length": 65536}
KFAB_HELDOUT = [{"batch_size": 3, "features": 5, "sequence_length": 37}]
KFAB_FORBIDDEN = ["torch.nn.functional.max_pool1d", "aten.max_pool2d", "aten.max_pool1d", "torch.max_pool1d"]
KFAB_COST = {"flops": "batch_size*features*sequence_length*5/2", "bytes": "4*batch_size*features*sequence_length*3/2"}


class Model(nn.Module):
    """nn.MaxPool1d(kernel_size, stride, padding, dilation)"""

    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, features, sequence_length)]


def get_init_inputs():
    return [kernel_size, stride, padding, dilation]
