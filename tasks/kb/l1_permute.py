# NCHW to NHWC layout change: permute(0, 2, 3, 1) written out contiguously (KernelBench format).
import torch
import torch.nn as nn

batch_size = 8
channels = 64
height = 32
width = 32

KFAB_OP_CLASS = "permute"
# Tuning shape on a GPU: 32M elements moved, memory-bound.
KFAB_GPU = {"batch_size": 32, "channels": 128, "height": 64, "width": 128}
KFAB_HELDOUT = [{"batch_size": 3, "channels": 19, "height": 13, "width": 37}]
KFAB_FORBIDDEN = ["torch.permute", "aten.permute"]
KFAB_COST = {"flops": "0", "bytes": "8*batch_size*channels*height*width"}


class Model(nn.Module):
    """y[n, h, w, c] = x[n, c, h, w], y contiguous"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1).contiguous()


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
