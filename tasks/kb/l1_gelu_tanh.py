# GELU with the tanh approximation over a (batch, sequence, hidden) tensor (KernelBench format).
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
seq_len = 128
hidden = 1024

KFAB_OP_CLASS = "activation"
# Tuning shape on a GPU: 32M elements, memory-bound.
KFAB_GPU = {"batch_size": 16, "seq_len": 2048, "hidden": 1024}
KFAB_HELDOUT = [{"batch_size": 3, "seq_len": 97, "hidden": 1001}]
KFAB_FORBIDDEN = ["torch.nn.functional.gelu", "aten.gelu"]
# per element: x^3 (2), * c (1), + x (1), * sqrt(2/pi) (1), tanh (1), + 1 (1), * x (1), * 0.5 (1)
KFAB_COST = {"flops": "9*batch_size*seq_len*hidden", "bytes": "8*batch_size*seq_len*hidden"}


class Model(nn.Module):
    """y = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))"""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
