# RMS normalisation over the last dimension with a learned per-feature gain (KernelBench format).
import torch
import torch.nn as nn

batch_size = 64
features = 2048
eps = 1e-6

KFAB_OP_CLASS = "rms_norm"
# Tuning shape on a GPU: large enough that the kernel, not the launch, is timed.
KFAB_GPU = {"batch_size": 8192, "features": 4096}
# Held-out shapes: module constants overridden before get_inputs() and get_init_inputs().
KFAB_HELDOUT = [{"batch_size": 33, "features": 1001}]
# What a candidate may not call: it would be the operation it replaces.
KFAB_FORBIDDEN = ["torch.rms_norm", "torch.nn.functional.rms_norm", "aten.rms_norm", "aten._fused_rms_norm"]
KFAB_COST = {"flops": "4*batch_size*features", "bytes": "8*batch_size*features + 4*features"}


class Model(nn.Module):
    """y = x / sqrt(mean(x^2, -1) + eps) * weight"""

    def __init__(self, features: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * scale * self.weight


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, eps]
