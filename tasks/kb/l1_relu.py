# Rectified linear unit applied elementwise to a 2-D activation tensor (KernelBench format).
import torch
import torch.nn as nn

batch_size = 32
features = 4096

KFAB_OP_CLASS = "activation"
# Tuning shape on a GPU: 64M elements, memory-bound.
KFAB_GPU = {"batch_size": 16384, "features": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "features": 1001}]
KFAB_FORBIDDEN = ["torch.relu", "torch.nn.functional.relu", "aten.relu"]
KFAB_COST = {"flops": "batch_size*features", "bytes": "8*batch_size*features"}


class Model(nn.Module):
    """y = max(x, 0)"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return []
