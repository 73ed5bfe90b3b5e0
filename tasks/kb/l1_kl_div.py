# KL(p || q) between row-wise softmax distributions given as logits, batch-averaged; scalar (KernelBench format).
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
num_classes = 1024

KFAB_OP_CLASS = "loss"
# Tuning shape on a GPU: 2 x 32M logits read, memory-bound.
KFAB_GPU = {"batch_size": 8192, "num_classes": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "num_classes": 1001}]
KFAB_FORBIDDEN = ["torch.nn.functional.kl_div", "torch.kl_div", "aten.kl_div"]
# two log-softmaxes (5 per element each) and p * (log p - log q) summed (4 per element)
KFAB_COST = {"flops": "14*batch_size*num_classes", "bytes": "8*batch_size*num_classes + 4"}


class Model(nn.Module):
    """loss = (1/batch_size) * sum_ij p[i, j] * (log p[i, j] - log q[i, j]), p, q = softmax of the logits"""

    def __init__(self):
        super().__init__()

    def forward(self, p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(p_logits, dim=-1)
        log_q = F.log_softmax(q_logits, dim=-1)
        return F.kl_div(log_q, log_p, reduction="batchmean", log_target=True)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randn(batch_size, num_classes)]


def get_init_inputs():
    return []
