# Log-softmax over the last dimension of a 2-D tensor, rows independent (KernelBench format).
import torch
import torch.nn as nn

batch_size = 32
dim = 4096

KFAB_OP_CLASS = "log_softmax"
# Tuning shape on a GPU: 64M elements, memory-bound.
KFAB_GPU = {"batch_size": 16384, "dim": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "dim": 3001}]
KFAB_FORBIDDEN = ["torch.log_softmax", "torch.nn.functional.log_softmax", "aten.log_softmax", "aten._log_softmax"]
# per element: max (1), x - max (1), exp (1), sum (1), subtract log-sum (1)
KFAB_COST = {"flops": "5*batch_size*dim", "bytes": "8*batch_size*dim"}


class Model(nn.Module):
    """y[i, j] = x[i, j] - log(sum_k exp(x[i, k]))"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
