# Inclusive prefix sum along the last dimension of a 2-D tensor (KernelBench format).
import torch
import torch.nn as nn

batch_size = 64
length = 4096

KFAB_OP_CLASS = "cumsum"
# Tuning shape on a GPU: 32M elements, memory-bound.
KFAB_GPU = {"batch_size": 8192, "length": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "length": 3001}, {"batch_size": 1021, "length": 131}]
KFAB_FORBIDDEN = ["torch.cumsum", "aten.cumsum"]
KFAB_COST = {"flops": "batch_size*length", "bytes": "8*batch_size*length"}
# Partial sums reach ~|100| at length 4096, where float rounding of a running sum (or of a tree scan)
# drifts by a few 1e-4; atol covers the outputs where the running sum crosses zero.
KFAB_TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}


class Model(nn.Module):
    """y[i, j] = sum_{k <= j} x[i, k]"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return []
