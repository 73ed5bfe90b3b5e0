# Inclusive prefix sum of the elements a boolean mask keeps, along the last dimension (KernelBench format;
# level1's 93_masked_cumsum at a small size): a float input and a bool one.
import torch
import torch.nn as nn

batch_size = 64
length = 4000

KFAB_OP_CLASS = "cumsum"
# Tuning shape on a GPU: 32M elements, memory-bound (4 bytes read, 1 byte of mask, 4 written each).
KFAB_GPU = {"batch_size": 8192, "length": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "length": 3001}, {"batch_size": 1021, "length": 131}]
KFAB_FORBIDDEN = ["torch.cumsum", "aten.cumsum"]
KFAB_COST = {"flops": "2*batch_size*length", "bytes": "9*batch_size*length"}
# Partial sums reach ~|60| at length 4000; atol covers the outputs where the running sum crosses zero.
KFAB_TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}


class Model(nn.Module):
    """y[i, j] = sum_{k <= j, mask[i, k]} x[i, k]"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x * mask, dim=-1)


def get_inputs():
    x = torch.randn(batch_size, length)
    return [x, torch.randint(0, 2, x.shape).bool()]


def get_init_inputs():
    return []
