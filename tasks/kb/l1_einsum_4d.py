# A 4-D tensor times a matrix written as an einsum (KernelBench format; KernelBench's
# level1/11_4D_tensor_matrix_multiplication at a smaller size). torch decomposes the einsum into unsqueezes
# and permutes around a bmm of one batch; the tracer follows them back to the inputs' own memory (by the
# traced tensors' strides) and takes it as one GEMM, [b*i*j, l] @ [l, k].
import torch
import torch.nn as nn

b = 2
i = 16
j = 32
l = 64
k = 96

KFAB_OP_CLASS = "matmul"
# Tuning shape on a GPU: KernelBench's own (b 8, i 256, j 512, l 256, k 768: 412 GFLOP).
KFAB_GPU = {"b": 8, "i": 256, "j": 512, "l": 256, "k": 768}
KFAB_HELDOUT = [{"b": 3, "i": 5, "j": 7, "l": 33, "k": 41}]
KFAB_FORBIDDEN = ["torch.matmul", "torch.mm", "torch.einsum", "aten.matmul", "aten.mm", "aten.addmm", "aten.bmm"]
KFAB_COST = {"flops": "2*b*i*j*l*k", "bytes": "4*b*i*j*l + 4*l*k + 4*b*i*j*k"}


class Model(nn.Module):
    """C[b, i, j, k] = sum_l A[b, i, j, l] * B[l, k]"""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bijl,lk->bijk", a, w)


def get_inputs():
    return [torch.rand(b, i, j, l), torch.rand(l, k)]


def get_init_inputs():
    return []
