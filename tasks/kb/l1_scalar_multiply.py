# A matrix times a Python float, as KernelBench's level1/5 at a small size (KernelBench format): the float
# reaches a native candidate as a 0-dim float32 tensor.
import torch
import torch.nn as nn

M = 512
N = 1000

KFAB_OP_CLASS = "elementwise"
# Tuning shape on a GPU: 64M elements, memory-bound.
KFAB_GPU = {"M": 8192, "N": 8192}
KFAB_HELDOUT = [{"M": 33, "N": 3001}]
KFAB_COST = {"flops": "M*N", "bytes": "8*M*N"}


class Model(nn.Module):
    """C = A * s"""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        return A * s


def get_inputs():
    return [torch.randn(M, N), 2.5]


def get_init_inputs():
    return []
