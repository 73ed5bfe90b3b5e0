# rms_norm (KernelBench format) in Triton: y = x / sqrt(mean(x^2, -1) + 1e-6) * weight.
# inputs = [x [B, F] f32, weight [F] f32], outputs = [y [B, F] f32, preallocated, written in place].
#
# Approach: one program per row (grid = (B,)), launched on the current stream of x's device.
#   - F <= 16384: the whole row is one BLOCK = next_power_of_two(F) vector held in registers, so x is
#     read from HBM once: load (masked, other=0) -> sum of squares (tl.sum, f32) -> 1/rms -> store
#     (x * r) * weight. num_warps grows with BLOCK (BLOCK / 256, 1..8; 16 at 16384), i.e. 8..32
#     elements per thread; the 8192 x 4096 tuning shape runs 8 warps x 16 floats (four 128-bit
#     loads per thread: Triton specialises F % 16 == 0 and the 16-byte-aligned pointers).
#   - longer rows: two passes over the row in CHUNK-wide steps (a vector accumulator of squares,
#     reduced once), the second pass re-reads x (mostly from L2) and writes y.
# x is loaded evict-first and the weight evict-last, so the weight (read by every row) stays cached.
# Row offsets are computed in int64. Nothing is allocated per call and no torch op computes
# anything: run() only checks the arguments and launches one kernel.
import torch
import triton
import triton.language as tl

_MAX_SINGLE_BLOCK = 16384  # F above this takes the chunked kernel
_CHUNK = 4096
_CHUNK_WARPS = 8


@triton.jit
def _rms_norm_rows(x_ptr, w_ptr, y_ptr, F, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < F
    x = tl.load(x_ptr + row * F + cols, mask=mask, other=0.0, eviction_policy="evict_first")
    w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last")
    ms = tl.sum(x * x, axis=0) / F
    r = 1.0 / tl.sqrt(ms + 1e-6)
    tl.store(y_ptr + row * F + cols, (x * r) * w, mask=mask)


@triton.jit
def _rms_norm_rows_chunked(x_ptr, w_ptr, y_ptr, F, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * F
    y_row = y_ptr + row * F
    offs = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, F, CHUNK):
        cols = start + offs
        v = tl.load(x_row + cols, mask=cols < F, other=0.0)
        acc += v * v
    ms = tl.sum(acc, axis=0) / F
    r = 1.0 / tl.sqrt(ms + 1e-6)
    for start in range(0, F, CHUNK):
        cols = start + offs
        mask = cols < F
        v = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
        w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last")
        tl.store(y_row + cols, (v * r) * w, mask=mask)


def _num_warps(block):
    if block >= 16384:
        return 16
    return min(max(block // 256, 1), 8)


def _check(inputs, outputs):
    if len(inputs) != 2 or len(outputs) != 1:
        raise ValueError("rms_norm expects inputs [x, weight] and outputs [y]")
    x, w = inputs
    y = outputs[0]
    for name, t, ndim in (("x", x, 2), ("weight", w, 1), ("y", y, 2)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.dim() != ndim:
            raise ValueError(f"{name}: expected a float32 tensor of rank {ndim}")
        if not t.is_contiguous():
            raise ValueError(f"{name}: expected a contiguous tensor")
    if w.device != x.device or y.device != x.device:
        raise ValueError("x, weight and y must be on one device")
    B, F = x.shape
    if tuple(w.shape) != (F,) or tuple(y.shape) != (B, F):
        raise ValueError(f"shape mismatch: x {tuple(x.shape)}, weight {tuple(w.shape)}, y {tuple(y.shape)}")
    return x, w, y, B, F


def _launch(x, w, y, B, F):
    if F <= _MAX_SINGLE_BLOCK:
        block = triton.next_power_of_2(F)
        _rms_norm_rows[(B,)](x, w, y, F, BLOCK=block, num_warps=_num_warps(block))
    else:
        _rms_norm_rows_chunked[(B,)](x, w, y, F, CHUNK=_CHUNK, num_warps=_CHUNK_WARPS)


def run(inputs, outputs):
    x, w, y, B, F = _check(inputs, outputs)
    if B == 0 or F == 0:
        return
    # Triton launches on the current device's current stream: make x's device the current one.
    if x.is_cuda and x.device.index is not None and x.device.index != torch.cuda.current_device():
        with torch.cuda.device(x.device):
            _launch(x, w, y, B, F)
    else:
        _launch(x, w, y, B, F)
