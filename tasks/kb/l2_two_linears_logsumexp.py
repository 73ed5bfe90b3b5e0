# Two Linear layers with a sigmoid between them and a logsumexp over the features (KernelBench format;
# KernelBench's level2/45_Gemm_Sigmoid_LogSumExp at a smaller size). No one program states two matrix
# products: the built-in tuner runs a plan of two, the first Linear and the sigmoid into a buffer, then
# the second Linear with the logsumexp over its rows.
import torch
import torch.nn as nn

batch_size = 96
input_size = 160
hidden_size = 256
output_size = 72

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: KernelBench's own is 16384 x 2048 -> 4096 -> 1024.
KFAB_GPU = {"batch_size": 4096, "input_size": 2048, "hidden_size": 4096, "output_size": 1024}
KFAB_HELDOUT = [{"batch_size": 37, "input_size": 88, "hidden_size": 120, "output_size": 52}]
KFAB_COST = {
    "flops": "2*batch_size*input_size*hidden_size + 2*batch_size*hidden_size*output_size",
    "bytes": "4*batch_size*input_size + 4*input_size*hidden_size + 4*hidden_size*output_size + 4*batch_size",
}


class Model(nn.Module):
    """y[i] = logsumexp_j (sigmoid(x W1^T + b1) W2^T + b2)[i, j]"""

    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super().__init__()
        self.linear1 = nn.Linear(input_size, hidden_size)
        self.linear2 = nn.Linear(hidden_size, output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sigmoid(self.linear1(x))
        return torch.logsumexp(self.linear2(h), dim=1)


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, output_size]
