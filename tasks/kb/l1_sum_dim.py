# Sum of a 3-D tensor over its middle dimension (a strided reduction) (KernelBench format).
import torch
import torch.nn as nn

batch_size = 16
dim1 = 256
dim2 = 256

KFAB_OP_CLASS = "reduction"
# Tuning shape on a GPU: 32M elements read, memory-bound.
KFAB_GPU = {"batch_size": 128, "dim1": 256, "dim2": 1024}
KFAB_HELDOUT = [{"batch_size": 7, "dim1": 1009, "dim2": 33}, {"batch_size": 3, "dim1": 5, "dim2": 3001}]
KFAB_FORBIDDEN = ["torch.sum", "aten.sum"]
KFAB_COST = {"flops": "batch_size*(dim1-1)*dim2", "bytes": "4*batch_size*dim1*dim2 + 4*batch_size*dim2"}
# A float running sum over ~1000 standard normals drifts by ~1e-4; outputs near zero get no help from rtol.
KFAB_TOLERANCE = {"atol": 5e-4, "rtol": 1e-4}


class Model(nn.Module):
    """y[b, j] = sum_i x[b, i, j]"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
