"""Allclose with the rules of DESIGN.md section 3, in float64, with the evidence a verdict reports
(the same fields as kfab-runner's comparison: src/eval/compare.cpp)."""
from __future__ import annotations

import math

import torch

# Elements compared at a time: the float64 copies of one slice and their masks stay near 1 GiB.
_SLICE = 1 << 24


def _num(v: float):
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


class Stats:
    def __init__(self) -> None:
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.tol_used = 0.0  # max |got - want| / (atol + rtol |want|): the share of the tolerance used
        self.checked = 0
        self.mismatches = 0
        self.nonfinite = 0
        self.first: dict | None = None
        self.problem: str | None = None  # a shape or dtype that does not match

    def ok(self) -> bool:
        return self.mismatches == 0 and self.problem is None

    def to_json(self) -> dict:
        j = {"max_abs_err": _num(self.max_abs), "max_rel_err": _num(self.max_rel),
             "tolerance_used": _num(self.tol_used), "checked": self.checked,
             "mismatches": self.mismatches, "nonfinite": self.nonfinite}
        if self.first is not None:
            j["first_mismatch"] = self.first
        if self.problem is not None:
            j["problem"] = self.problem
        return j


def compare(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float, name: str, seed: int, call: int,
            st: Stats) -> None:
    """|got - want| <= atol + rtol |want|; NaN must meet NaN, an infinity the same infinity; the shape
    and dtype must match exactly."""
    if not isinstance(got, torch.Tensor):
        st.problem = st.problem or f"{name}: the candidate returned {type(got).__name__}, not a tensor"
        st.mismatches += 1
        return
    if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
        st.problem = st.problem or (f"{name}: got {str(got.dtype).replace('torch.', '')}{list(got.shape)}, "
                                    f"want {str(want.dtype).replace('torch.', '')}{list(want.shape)}")
        st.mismatches += 1
        return
    # In float64 on the tensors' own device (a GPU compares 64 Mi elements in milliseconds, a CPU
    # takes seconds), a slice at a time so that the float64 copies stay small.
    g_all = got.detach().reshape(-1)
    w_all = want.detach().reshape(-1)
    n = w_all.numel()
    st.checked += n
    for lo in range(0, n, _SLICE):
        g = g_all[lo:lo + _SLICE].to(torch.float64)
        w = w_all[lo:lo + _SLICE].to(device=g.device, dtype=torch.float64)
        _compare_slice(g, w, lo, atol, rtol, name, seed, call, tuple(want.shape), st)


def _compare_slice(g: torch.Tensor, w: torch.Tensor, offset: int, atol: float, rtol: float, name: str, seed: int,
                   call: int, shape: tuple, st: Stats) -> None:
    w_nan, w_inf = torch.isnan(w), torch.isinf(w)
    w_fin = ~(w_nan | w_inf)
    g_fin = torch.isfinite(g)
    both = w_fin & g_fin
    diff = torch.where(both, (g - w).abs(), torch.zeros_like(w))
    rel = torch.where(both & (w != 0), diff / w.abs().clamp_min(1e-300), torch.where(both, diff, torch.zeros_like(w)))
    allowed = atol + rtol * w.abs()
    if both.any():
        st.max_abs = max(st.max_abs, float(diff.max()))
        st.max_rel = max(st.max_rel, float(rel.max()))
        used = torch.where(allowed > 0, diff / allowed.clamp_min(1e-300), torch.where(diff > 0, math.inf, 0.0))
        st.tol_used = max(st.tol_used, float(used.max()))
    ok = torch.where(w_nan, torch.isnan(g), torch.where(w_inf, g == w, both & (diff <= allowed)))
    st.nonfinite += int((w_fin & ~g_fin).sum())
    # a value that is not finite where the reference's is, or a NaN or infinity missed, is an infinite error:
    # the summary never reads 0 for outputs that are NaN
    if bool((~ok & ~both).any()):
        st.max_abs = st.max_rel = st.tol_used = math.inf
    bad = int((~ok).sum())
    if bad == 0:
        return
    st.mismatches += bad
    if st.first is None:
        j = int((~ok).nonzero()[0])
        i = offset + j
        coord, rest = [], i
        for d in reversed(shape):
            coord.append(rest % d)
            rest //= d
        st.first = {"output": name, "index": i, "coord": list(reversed(coord)), "got": _num(float(g[j])),
                    "want": _num(float(w[j])), "seed": seed, "call": call}
