# Mish activation, x * tanh(softplus(x)), over a (batch, channels, length) tensor (KernelBench format).
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
channels = 64
length = 512

KFAB_OP_CLASS = "activation"
# Tuning shape on a GPU: 32M elements, memory-bound.
KFAB_GPU = {"batch_size": 64, "channels": 256, "length": 2048}
KFAB_HELDOUT = [{"batch_size": 3, "channels": 7, "length": 1001}]
KFAB_FORBIDDEN = ["torch.nn.functional.mish", "aten.mish"]
# per element: exp (1), + 1 (1), log (1), tanh (1), * x (1)
KFAB_COST = {"flops": "5*batch_size*channels*length", "bytes": "8*batch_size*channels*length"}


class Model(nn.Module):
    """y = x * tanh(log(1 + exp(x)))"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mish(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return []
