"""The worker's comparison (python/kfab_worker/compare.py) against the rules of DESIGN.md section 3,
with slices small enough that a tensor spans several: run by kb_test.cpp (label python), on the CPU
and, where torch sees one, on a GPU. Exits non-zero with the failed check's message.

    python3 tests/python/compare_check.py PYTHON_WORKER_DIR   (the folder that holds kfab_worker)"""
import sys

import torch

sys.path.insert(0, sys.argv[1])
from kfab_worker import compare as cmp  # noqa: E402


def check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAILED: {what}")
        sys.exit(1)


def run(device: str) -> None:
    cmp._SLICE = 7  # tensors below span several slices
    want = torch.arange(60, dtype=torch.float32, device=device).reshape(3, 4, 5) / 7.0
    st = cmp.Stats()
    cmp.compare(want.clone(), want, 1e-5, 1e-5, "out", 0, 1, st)
    check(st.ok() and st.checked == 60 and st.max_abs == 0.0, f"{device}: an equal tensor passes ({st.to_json()})")

    got = want.clone()
    got[1, 2, 3] += 1.0  # flat index 33: in the fifth slice
    got[2, 3, 4] += 2.0  # flat index 59: in the last, partial slice
    st = cmp.Stats()
    cmp.compare(got, want, 1e-5, 1e-5, "out", 3, 2, st)
    j = st.to_json()
    check(j["mismatches"] == 2, f"{device}: two mismatches counted ({j})")
    check(j["first_mismatch"]["index"] == 33 and j["first_mismatch"]["coord"] == [1, 2, 3],
          f"{device}: the first mismatch is flat index 33 at [1, 2, 3] ({j['first_mismatch']})")
    check(abs(j["first_mismatch"]["got"] - float(got[1, 2, 3])) < 1e-6 and j["first_mismatch"]["seed"] == 3,
          f"{device}: the first mismatch's value and seed ({j['first_mismatch']})")
    check(abs(j["max_abs_err"] - 2.0) < 1e-5, f"{device}: max_abs_err is the largest difference, 2 ({j})")

    # NaN must meet NaN and an infinity the same infinity; a finite value where one is wanted is a mismatch
    w = torch.tensor([1.0, float("nan"), float("inf"), 2.0, float("-inf"), 3.0, 4.0, 5.0, float("nan")], device=device)
    g = w.clone()
    st = cmp.Stats()
    cmp.compare(g, w, 0.0, 0.0, "out", 0, 1, st)
    check(st.ok(), f"{device}: NaN meets NaN and inf the same inf ({st.to_json()})")
    g[8] = 0.0  # a number where NaN is wanted
    g[2] = float("-inf")  # the other infinity
    g[6] = float("nan")  # NaN where a number is wanted
    st = cmp.Stats()
    cmp.compare(g, w, 1.0, 1.0, "out", 0, 1, st)
    check(st.mismatches == 3 and st.nonfinite == 1 and st.first["index"] == 2,
          f"{device}: three non-finite mismatches, the first at 2 ({st.to_json()})")
    check(st.to_json()["max_abs_err"] == "inf" and st.to_json()["tolerance_used"] == "inf",
          f"{device}: the summary of non-finite mismatches is an infinite error, never 0 ({st.to_json()})")
    st = cmp.Stats()
    cmp.compare(torch.full((4,), float("nan"), device=device), torch.ones(4, device=device), 1.0, 1.0, "out", 0, 1, st)
    check(st.to_json()["max_abs_err"] == "inf" and st.nonfinite == 4, f"{device}: an all-NaN output reads inf ({st.to_json()})")

    # tolerance: atol + rtol * |want|, inclusive
    w = torch.full((10,), 2.0, dtype=torch.float64, device=device)
    st = cmp.Stats()
    cmp.compare(w + 0.25, w, 0.05, 0.1, "out", 0, 1, st)
    check(st.ok(), f"{device}: a difference of exactly atol + rtol |want| passes ({st.to_json()})")
    check(abs(st.to_json()["tolerance_used"] - 1.0) < 1e-9, f"{device}: it uses the whole tolerance ({st.to_json()})")
    st = cmp.Stats()
    cmp.compare(w + 0.0625, w, 0.05, 0.1, "out", 0, 1, st)
    check(abs(st.tol_used - 0.25) < 1e-9, f"{device}: a quarter of it is 0.25 of the tolerance ({st.to_json()})")
    st = cmp.Stats()
    cmp.compare(w + 0.01, w, 0.0, 0.0, "out", 0, 1, st)
    check(st.to_json()["tolerance_used"] == "inf", f"{device}: any difference with no tolerance is unbounded ({st.to_json()})")
    st = cmp.Stats()
    cmp.compare(w + 0.2501, w, 0.05, 0.1, "out", 0, 1, st)
    check(st.mismatches == 10, f"{device}: a larger one fails ({st.to_json()})")

    # the shape and dtype must match exactly
    st = cmp.Stats()
    cmp.compare(want.double(), want, 1.0, 1.0, "out", 0, 1, st)
    check(not st.ok() and "float64" in (st.problem or ""), f"{device}: a dtype that differs is a mismatch ({st.to_json()})")
    st = cmp.Stats()
    cmp.compare(want.reshape(12, 5), want, 1.0, 1.0, "out", 0, 1, st)
    check(not st.ok() and "[12, 5]" in (st.problem or ""), f"{device}: a shape that differs is a mismatch ({st.to_json()})")
    st = cmp.Stats()
    cmp.compare(torch.empty(0, device=device), torch.empty(0, device=device), 0.0, 0.0, "out", 0, 1, st)
    check(st.ok() and st.checked == 0, f"{device}: empty tensors compare equal ({st.to_json()})")
    print(f"{device}: ok")


run("cpu")
if torch.cuda.is_available():
    run("cuda")
