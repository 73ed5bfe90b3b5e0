# C = A @ b for a vector b of shape [K, 1] (KernelBench format; KernelBench's level1/4_Matrix_vector_multiplication_
# at a smaller size): memory-bound, one pass over A. The tracer takes it as the row program
# rowsum(A * b) rather than a GEMM whose tiles would be one column wide.
import torch
import torch.nn as nn

M = 256
K = 8192

KFAB_OP_CLASS = "reduction"
# Tuning shape on a GPU: KernelBench's own is 2048 x 1048576 (8 GiB of A).
KFAB_GPU = {"M": 2048, "K": 131072}
KFAB_HELDOUT = [{"M": 97, "K": 1001}]
KFAB_COST = {"flops": "2*M*K", "bytes": "4*M*K + 4*K + 4*M"}


class Model(nn.Module):
    """C = A @ b, b of shape [K, 1]"""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, 1)]


def get_init_inputs():
    return []
