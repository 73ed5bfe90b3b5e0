"""Calls a KernelBench problem's ModelNew (`kfab export`) on the problem's own inputs a few times, for a
profiler to watch (scripts/kb_spot.sh with KFAB_SPOT_PROFILE=1 runs it under ncu):

  python3 scripts/kb_ncu.py PROBLEM.py MODELNEW.py [CALLS]
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from modelnew_allclose import load  # noqa: E402  (a module from its file)


def main() -> None:
    problem, new = load(sys.argv[1], "kb_problem"), load(sys.argv[2], "kb_modelnew")
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    torch.manual_seed(0)
    model = new.ModelNew(*problem.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    with torch.no_grad():
        for _ in range(calls):
            model(*inputs)
    torch.cuda.synchronize()
    print(f"{calls} calls of {sys.argv[2]}")


if __name__ == "__main__":
    main()
