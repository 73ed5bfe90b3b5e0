# C = A.T @ B with A given as [K, M] (KernelBench format; KernelBench's level1/16_Matmul_with_transposed_A
# at a smaller size). The built-in tuner transposes A into a buffer first, then runs its GEMM.
import torch
import torch.nn as nn

m = 256
k = 512
n = 384

KFAB_OP_CLASS = "matmul"
# Tuning shape on a GPU: KernelBench's own (M 2048, K 8192, N 4096: 137 GFLOP, compute-bound).
KFAB_GPU = {"m": 2048, "k": 8192, "n": 4096}
KFAB_HELDOUT = [{"m": 33, "k": 101, "n": 97}]
KFAB_FORBIDDEN = [
    "torch.matmul",
    "torch.mm",
    "torch.nn.functional.linear",
    "aten.matmul",
    "aten.mm",
    "aten.addmm",
    "aten.bmm",
]
KFAB_COST = {"flops": "2*m*n*k", "bytes": "4*m*k + 4*k*n + 4*m*n"}


class Model(nn.Module):
    """C[i, j] = sum_p A[p, i] * B[p, j]"""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a.T, b)


def get_inputs():
    return [torch.rand(k, m), torch.rand(k, n)]


def get_init_inputs():
    return []
