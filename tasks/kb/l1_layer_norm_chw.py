# Layer normalisation over (channels, height, width) of an NCHW tensor, as KernelBench's level1/40
# (KernelBench format): a row is the last three dimensions.
import torch
import torch.nn as nn

batch_size = 4
features = 8
dim1 = 32
dim2 = 48

KFAB_OP_CLASS = "layer_norm"
# Tuning shape on a GPU: 64M elements in 32 rows of 2M, memory-bound.
KFAB_GPU = {"batch_size": 32, "features": 32, "dim1": 256, "dim2": 256}
KFAB_HELDOUT = [{"batch_size": 3, "features": 5, "dim1": 7, "dim2": 11}]
KFAB_FORBIDDEN = ["torch.layer_norm", "torch.nn.functional.layer_norm", "aten.layer_norm", "aten.native_layer_norm"]
KFAB_COST = {"flops": "7*batch_size*features*dim1*dim2", "bytes": "8*batch_size*features*dim1*dim2 + 8*features*dim1*dim2"}


class Model(nn.Module):
    """y = (x - mean(x over C, H, W)) / sqrt(var + eps) * weight[C, H, W] + bias[C, H, W]"""

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)
        # Non-trivial affine parameters, so that a kernel which drops them is caught.
        with torch.no_grad():
            self.ln.weight.copy_(1.0 + 0.1 * torch.randn(normalized_shape))
            self.ln.bias.copy_(0.1 * torch.randn(normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [(features, dim1, dim2)]
