# Single-head scaled dot-product attention without a mask: softmax(Q K^T / sqrt(d)) V (KernelBench format).
import math

import torch
import torch.nn as nn

batch_size = 4
seq_len = 128
head_dim = 64

KFAB_OP_CLASS = "matmul_epilogue"
# Tuning shape on a GPU: 69 GFLOP; the reference materialises the 512 MiB score matrix, a fused kernel need not.
KFAB_GPU = {"batch_size": 32, "seq_len": 2048, "head_dim": 128}
KFAB_HELDOUT = [{"batch_size": 3, "seq_len": 97, "head_dim": 33}]
# The fused library op is the whole task.
KFAB_FORBIDDEN = [
    "torch.nn.functional.scaled_dot_product_attention",
    "aten.scaled_dot_product_attention",
    "aten._scaled_dot_product_flash_attention",
    "aten._scaled_dot_product_efficient_attention",
    "aten._scaled_dot_product_cudnn_attention",
    "aten._scaled_dot_product_flash_attention_for_cpu",
]
# two GEMMs (2 per multiply-add each); per score: scale (1), softmax (4)
KFAB_COST = {
    "flops": "4*batch_size*seq_len*seq_len*head_dim + 5*batch_size*seq_len*seq_len",
    "bytes": "16*batch_size*seq_len*head_dim",
}
# With doubled inputs the scores reach ~20, and their f32 rounding moves the outputs (~0.7) by up to ~3e-5.
KFAB_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


class Model(nn.Module):
    """out[b] = softmax(q[b] @ k[b]^T / sqrt(head_dim), dim=-1) @ v[b]"""

    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, head_dim),
        torch.randn(batch_size, seq_len, head_dim),
        torch.randn(batch_size, seq_len, head_dim),
    ]


def get_init_inputs():
    return [head_dim]
