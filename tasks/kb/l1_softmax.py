# Softmax over the last dimension of a 2-D tensor, rows independent (KernelBench format).
import torch
import torch.nn as nn

batch_size = 64
dim = 2048

KFAB_OP_CLASS = "softmax"
# Tuning shape on a GPU: 64M elements, memory-bound.
KFAB_GPU = {"batch_size": 8192, "dim": 8192}
KFAB_HELDOUT = [{"batch_size": 33, "dim": 3001}, {"batch_size": 257, "dim": 37}]
KFAB_FORBIDDEN = ["torch.softmax", "torch.nn.functional.softmax", "aten.softmax", "aten._softmax"]
# per element: max (1), x - max (1), exp (1), sum (1), scale (1)
KFAB_COST = {"flops": "5*batch_size*dim", "bytes": "8*batch_size*dim"}
# Outputs are ~1/dim (1.2e-4 on the GPU shape): the f32 default atol would let through errors of several
# percent there, so atol is tightened and rtol does the work. An f32 softmax is off by ~1e-9.
KFAB_TOLERANCE = {"atol": 1e-7, "rtol": 1e-4}


class Model(nn.Module):
    """y[i, j] = exp(x[i, j]) / sum_k exp(x[i, k])"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
