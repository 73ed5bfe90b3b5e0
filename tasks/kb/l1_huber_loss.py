# Per-sample Huber loss: elementwise Huber of pred - target, averaged over features (KernelBench format).
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
features = 2048
delta = 1.0

KFAB_OP_CLASS = "loss"
# Tuning shape on a GPU: 2 x 32M elements read, memory-bound.
KFAB_GPU = {"batch_size": 16384, "features": 2048}
KFAB_HELDOUT = [{"batch_size": 33, "features": 1001}, {"batch_size": 257, "features": 3}]
# Huber with delta = 1 is smooth L1 with beta = 1: both are the op this task replaces.
KFAB_FORBIDDEN = [
    "torch.nn.functional.huber_loss",
    "torch.nn.functional.smooth_l1_loss",
    "aten.huber_loss",
    "aten.smooth_l1_loss",
]
# per element: subtract (1), abs (1), compare (1), quadratic or linear branch (2), sum (1)
KFAB_COST = {"flops": "6*batch_size*features", "bytes": "8*batch_size*features + 4*batch_size"}


class Model(nn.Module):
    """loss[i] = mean_j h(pred[i, j] - target[i, j]), h(d) = d^2/2 if |d| < delta else delta*(|d| - delta/2)"""

    def __init__(self, delta: float):
        super().__init__()
        self.delta = delta

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.huber_loss(pred, target, reduction="none", delta=self.delta).mean(dim=1)


def get_inputs():
    return [torch.randn(batch_size, features), torch.randn(batch_size, features)]


def get_init_inputs():
    return [delta]
