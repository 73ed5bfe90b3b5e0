# C = triu(A @ B) of two upper-triangular matrices (KernelBench format; KernelBench's
# level1/14_Matmul_for_upper_triangular_matrices at a smaller size). torch.triu traces to a mask over
# the column and row indices, where(colidx >= rowidx, acc, 0): a GEMM with a masked epilogue.
import torch
import torch.nn as nn

n = 384

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: KernelBench's own (4096: 137 GFLOP as a full GEMM).
KFAB_GPU = {"n": 4096}
KFAB_HELDOUT = [{"n": 101}]
KFAB_FORBIDDEN = ["torch.matmul", "torch.mm", "aten.matmul", "aten.mm", "aten.addmm", "aten.bmm"]
KFAB_COST = {"flops": "2*n*n*n", "bytes": "12*n*n"}


class Model(nn.Module):
    """C = triu(A @ B)"""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.triu(torch.matmul(a, b))


def get_inputs():
    return [torch.triu(torch.rand(n, n)), torch.triu(torch.rand(n, n))]


def get_init_inputs():
    return []
