# Linear layer, softmax over the output features, then the mean distribution over the batch (KernelBench format).
import torch
import torch.nn as nn

batch_size = 128
in_features = 256
out_features = 256

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: 275 GFLOP, compute-bound.
KFAB_GPU = {"batch_size": 8192, "in_features": 4096, "out_features": 4096}
KFAB_HELDOUT = [{"batch_size": 33, "in_features": 1001, "out_features": 97}]
# GEMM: 2 per multiply-add; epilogue per output: bias (1), softmax (5), batch mean (1)
KFAB_COST = {
    "flops": "2*batch_size*in_features*out_features + 7*batch_size*out_features",
    "bytes": "4*batch_size*in_features + 4*in_features*out_features + 8*out_features",
}
# The outputs are probabilities of size ~1/out_features (2.4e-4 on the GPU shape): the f32 default atol
# would be a loose check there, so atol is tightened and the relative error does the work.
KFAB_TOLERANCE = {"atol": 1e-7, "rtol": 1e-4}


class Model(nn.Module):
    """y[j] = mean_i softmax(x @ W^T + b, dim=1)[i, j]"""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.linear(x), dim=1).mean(dim=0)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
