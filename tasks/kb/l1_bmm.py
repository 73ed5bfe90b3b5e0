# Batched matrix product C[b] = A[b] @ B[b] over a leading batch dimension (KernelBench format).
import torch
import torch.nn as nn

batch_size = 8
m = 128
k = 128
n = 128

KFAB_OP_CLASS = "matmul"
# Tuning shape on a GPU: 69 GFLOP, compute-bound.
KFAB_GPU = {"batch_size": 32, "m": 1024, "k": 1024, "n": 1024}
KFAB_HELDOUT = [{"batch_size": 3, "m": 33, "k": 257, "n": 97}]
KFAB_FORBIDDEN = ["torch.bmm", "torch.matmul", "torch.mm", "aten.bmm", "aten.matmul", "aten.mm", "aten.baddbmm"]
KFAB_COST = {
    "flops": "2*batch_size*m*n*k",
    "bytes": "4*batch_size*m*k + 4*batch_size*k*n + 4*batch_size*m*n",
}
# Outputs are ~32 in magnitude at k = 1024 (~128 with doubled inputs): an in-order f32 dot product drifts
# from torch's result by up to ~1e-3 on the largest outputs (rtol covers it); tf32 is off by 0.1 or more.
KFAB_TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}


class Model(nn.Module):
    """C[b, i, j] = sum_p A[b, i, p] * B[b, p, j]"""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch_size, m, k), torch.randn(batch_size, k, n)]


def get_init_inputs():
    return []
