# Mean squared error of predictions against targets over all elements; scalar output (KernelBench format).
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
features = 4096

KFAB_OP_CLASS = "loss"
# Tuning shape on a GPU: 2 x 32M elements read, memory-bound.
KFAB_GPU = {"batch_size": 8192, "features": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "features": 1001}]
KFAB_FORBIDDEN = ["torch.nn.functional.mse_loss", "aten.mse_loss"]
# per element: subtract (1), square (1), sum (1)
KFAB_COST = {"flops": "3*batch_size*features", "bytes": "8*batch_size*features + 4"}


class Model(nn.Module):
    """loss = mean((pred - target)^2)"""

    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(pred, target)


def get_inputs():
    return [torch.randn(batch_size, features), torch.randn(batch_size, features)]


def get_init_inputs():
    return []
