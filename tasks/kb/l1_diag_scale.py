# C = diag(a) @ B written as a.unsqueeze(1) * B (KernelBench format; KernelBench's
# level1/12_Matmul_with_diagonal_matrices_ at a smaller size): a row's scale. With as many rows as
# columns, a's [n] shape alone would read as one value per column; its unsqueeze(1) says per row.
import torch
import torch.nn as nn

n = 512
m = 512

KFAB_OP_CLASS = "elementwise"
# Tuning shape on a GPU: KernelBench's own.
KFAB_GPU = {"n": 4096, "m": 4096}
KFAB_HELDOUT = [{"n": 97, "m": 131}]
KFAB_COST = {"flops": "n*m", "bytes": "4*n + 8*n*m"}


class Model(nn.Module):
    """C[i, j] = a[i] * B[i, j]"""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.unsqueeze(1) * b


def get_inputs():
    return [torch.rand(n), torch.rand(n, m)]


def get_init_inputs():
    return []
