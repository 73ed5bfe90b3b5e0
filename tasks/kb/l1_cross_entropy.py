# Mean cross-entropy loss of class logits against integer targets; scalar output (KernelBench format).
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
num_classes = 1000

KFAB_OP_CLASS = "cross_entropy"
# Tuning shape on a GPU: 32M logits, memory-bound.
KFAB_GPU = {"batch_size": 8192, "num_classes": 4096}
KFAB_HELDOUT = [{"batch_size": 97, "num_classes": 3001}, {"batch_size": 1031, "num_classes": 7}]
KFAB_FORBIDDEN = [
    "torch.nn.functional.cross_entropy",
    "torch.nn.functional.nll_loss",
    "aten.cross_entropy_loss",
    "aten.nll_loss",
    "aten.nll_loss_forward",
]
# per logit: max (1), subtract (1), exp (1), add (1); per row: log, add, subtract
KFAB_COST = {
    "flops": "4*batch_size*num_classes + 3*batch_size",
    "bytes": "4*batch_size*num_classes + 8*batch_size + 4",
}


class Model(nn.Module):
    """loss = mean_i (log(sum_j exp(logits[i, j])) - logits[i, targets[i]])"""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
