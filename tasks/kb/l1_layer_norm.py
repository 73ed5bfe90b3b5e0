# Layer normalisation over the hidden dimension of a (batch, sequence, hidden) tensor (KernelBench format).
import torch
import torch.nn as nn

batch_size = 8
seq_len = 64
hidden = 1024
eps = 1e-5

KFAB_OP_CLASS = "layer_norm"
# Tuning shape on a GPU: 32M elements, memory-bound.
KFAB_GPU = {"batch_size": 16, "seq_len": 2048, "hidden": 1024}
KFAB_HELDOUT = [{"batch_size": 3, "seq_len": 11, "hidden": 1001}]
KFAB_FORBIDDEN = ["torch.layer_norm", "torch.nn.functional.layer_norm", "aten.layer_norm", "aten.native_layer_norm"]
# per element: mean sum (1), x - mean (1), square and sum (2), * rstd (1), * weight (1), + bias (1)
KFAB_COST = {"flops": "7*batch_size*seq_len*hidden", "bytes": "8*batch_size*seq_len*hidden + 8*hidden"}


class Model(nn.Module):
    """y = (x - mean(x, -1)) / sqrt(var(x, -1) + eps) * weight + bias"""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        # Non-trivial affine parameters, so that a kernel which drops them is caught.
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden, eps]
