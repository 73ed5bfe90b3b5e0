# Dense matrix product C = A @ B of two row-major f32 matrices (KernelBench format).
import torch
import torch.nn as nn

m = 256
k = 256
n = 256

KFAB_OP_CLASS = "matmul"
# Tuning shape on a GPU: 137 GFLOP, compute-bound.
KFAB_GPU = {"m": 4096, "k": 4096, "n": 4096}
KFAB_HELDOUT = [{"m": 97, "k": 1001, "n": 131}, {"m": 5, "k": 33, "n": 3001}]
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
# Outputs are ~64 in magnitude at k = 4096 (~256 when the harness doubles the inputs): a plain in-order f32
# dot product then drifts by up to ~3e-3 from torch's result on outputs near zero; tf32 is off by 0.1 or more.
KFAB_TOLERANCE = {"atol": 5e-3, "rtol": 1e-3}


class Model(nn.Module):
    """C[i, j] = sum_p A[i, p] * B[p, j]"""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return []
