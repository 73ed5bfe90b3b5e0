"""The worker's memory-saving pieces (issue 21), checked on the CPU and, where torch sees one, on a GPU:
the input fingerprint that replaced a copy of the inputs, the footprint found on fake tensors, the
room check, inputs scaled in place, the reference's answer kept without a copy where nothing else holds
it, and the exported ModelNew checked against the candidate a slice at a time. Run by kb_test.cpp (label
python). Exits non-zero with the failed check's message.

    python3 tests/python/memory_check.py PYTHON_WORKER_DIR SOURCE_DIR"""
import sys

import torch

sys.path.insert(0, sys.argv[1])
from kfab_worker import compare as cmp  # noqa: E402
from kfab_worker import footprint as fp  # noqa: E402
from kfab_worker import jobs  # noqa: E402
from kfab_worker import task as taskmod  # noqa: E402

SOURCE = sys.argv[2]


def check(cond: bool, what: str) -> None:
    if not cond:
        print(f"FAILED: {what}")
        sys.exit(1)


def fingerprints(device: str) -> None:
    jobs._FP_SLICE = 16  # tensors below span several slices
    x = torch.randn(7, 13, device=device)
    f = jobs._fingerprint(x)
    check(jobs._fingerprint(x.clone()) == f, f"{device}: an equal tensor has the same fingerprint")
    for flat in (0, 17, 90):  # the first slice, a middle one, the last (partial) one
        y = x.clone()
        bits = y.view(-1).view(torch.int32)
        bits[flat] ^= 1  # the lowest bit of one element
        check(jobs._fingerprint(y) != f, f"{device}: one bit flipped at {flat} changes the fingerprint")
    y = x.clone()
    y.view(-1)[[3, 40]] = y.view(-1)[[40, 3]]  # two elements swapped: the plain sum holds, the mixed one not
    check(jobs._fingerprint(y) != f, f"{device}: two elements swapped change the fingerprint")
    check(jobs._fingerprint(x.reshape(13, 7)) != f, f"{device}: the shape is part of the fingerprint")
    for dt in (torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.bool):
        z = (torch.rand(50, device=device) > 0.5).to(dt)
        g = jobs._fingerprint(z)
        w = z.clone()
        w[49] = 1 - w[49] if dt != torch.bool else ~w[49]
        check(jobs._fingerprint(w) != g, f"{device}: a changed last element of a {dt} tensor is seen")
    print(f"{device}: fingerprints ok")


def footprints() -> None:
    t = taskmod.KbTask(f"{SOURCE}/tasks/kb/rms_norm.py")
    r = fp.footprint(t, {}, torch.float32)
    check(r == {"inputs": 64 * 2048 * 4, "weights": 2048 * 4, "outputs": 64 * 2048 * 4, "flops": r.get("flops")},
          f"rms_norm's footprint: {r}")
    huge = taskmod.KbTask(f"{SOURCE}/tests/fixtures/kb/coverage/huge_relu.py")
    h = fp.footprint(huge, {}, torch.float32)  # 256 GiB of input, on fake tensors: no memory
    check(h["inputs"] == 65536 * 1048576 * 4 and h["outputs"] == h["inputs"], f"huge_relu's footprint: {h}")
    try:
        fp.check_room(h, h["inputs"] + h["outputs"], "the test", "cpu")
        check(fp.host_available() == 0, "512 GiB fit in this host's memory?")
    except fp.NoRoom as e:
        check("does not fit in memory" in str(e) and "inputs 256.00 GiB" in str(e), f"the refusal's figures: {e}")
    fp.check_room(r, 1 << 20, "the test", "cpu")  # a MiB fits
    print("footprints ok")


def room_waits() -> None:
    """How long a job waits for memory others hold (KFAB_ROOM_WAIT_S, within the job's deadline), and
    on a GPU: a job that fits once another holder lets go waits for it instead of being refused."""
    import os
    import threading

    os.environ.pop("KFAB_ROOM_WAIT_S", None)
    check(fp.room_wait_s(600) == 0, "no wait unless asked")
    os.environ["KFAB_ROOM_WAIT_S"] = "900"
    check(fp.room_wait_s(120) == 0.75 * 120 - 10, f"the wait within the deadline: {fp.room_wait_s(120)}")
    check(fp.room_wait_s(5000) == 900, "the wait asked, under a long deadline")
    check(fp.room_wait_s(0) == 0, "no deadline known: no wait")
    os.environ.pop("KFAB_ROOM_WAIT_S")
    if not torch.cuda.is_available():
        print("room waits ok (no GPU: the wait itself not run)")
        return
    free, _ = torch.cuda.mem_get_info()
    need = int(free * 0.75)
    fake = {"inputs": need, "outputs": 0, "weights": 0}
    held = [torch.empty(int(free * 0.5) // 4, dtype=torch.float32, device="cuda")]
    try:
        fp.check_room(fake, need, "the test", "cuda", 0.0)
        check(False, "refused without a wait while half the memory is held")
    except fp.NoRoom:
        pass

    def let_go() -> None:
        held.clear()
        torch.cuda.empty_cache()

    timer = threading.Timer(1.0, let_go)
    timer.start()
    fp.check_room(fake, need, "the test", "cuda", 60.0)  # raises NoRoom if the wait does not see the room
    timer.join()
    print("room waits ok")


def scaling() -> None:
    t = taskmod.KbTask(f"{SOURCE}/tasks/kb/rms_norm.py")
    one = t.inputs({}, 11, "cpu", torch.float32, 1.0)[0]
    two = t.inputs({}, 11, "cpu", torch.float32, 2.0)[0]
    check(torch.equal(two, one * 2), "seed 11 at scale 2 is twice seed 11 at scale 1")
    # changed in place only where get_inputs keeps nothing: a tensor it keeps at module level, in a
    # closure, or returns twice, and a view, are scaled by a copy
    kept = torch.ones(4, 5)
    t.mod.KEPT = kept
    t.mod.get_inputs = lambda: [kept, torch.ones(4, 5)]
    for _ in range(2):
        xs = t.inputs({}, 0, "cpu", torch.float32, 2.0)
        check(torch.equal(kept, torch.ones(4, 5)), "a module-level tensor is not scaled in place")
        check(torch.equal(xs[0], 2 * kept) and torch.equal(xs[1], torch.full((4, 5), 2.0)), "the scaled inputs")
    del t.mod.KEPT
    held = torch.ones(3)
    t.mod.get_inputs = lambda: [held, held]
    for _ in range(2):
        ys = t.inputs({}, 0, "cpu", torch.float32, 2.0)
        check(torch.equal(held, torch.ones(3)), "a tensor held in a closure is not scaled in place")
        check(torch.equal(ys[0], torch.full((3,), 2.0)) and torch.equal(ys[1], torch.full((3,), 2.0)), "returned twice")
    base = torch.ones(6)
    t.mod.get_inputs = lambda: [base[:3]]
    t.inputs({}, 0, "cpu", torch.float32, 2.0)
    check(torch.equal(base, torch.ones(6)), "a view's base is not scaled in place")
    t.mod.get_inputs = lambda: [torch.ones(5)]
    fresh = t.inputs({}, 0, "cpu", torch.float32, 0.5)[0]
    check(torch.equal(fresh, torch.full((5,), 0.5)), "a fresh tensor is scaled")
    # and in place: the tensor get_inputs made is the one returned (no copy of a 16 GB input)
    ptr = []

    def gi():
        v = torch.ones(5)
        ptr.append(v.data_ptr())
        return [v]
    t.mod.get_inputs = gi
    z = t.inputs({}, 0, "cpu", torch.float32, 2.0)[0]
    check(z.data_ptr() == ptr[-1] and torch.equal(z, torch.full((5,), 2.0)), "a fresh input is scaled in place, not copied")
    print("scaling ok")


def answers_kept() -> None:
    """The trusted worker keeps the Model's output as its answer without a copy only where no one else
    can change it; whatever the Model keeps, returns of its inputs or parameters, or views, is copied."""
    x = torch.randn(8, 8)
    glob = torch.randn(3)

    class Fresh(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x)

    class Keeps(torch.nn.Module):
        def forward(self, x):
            self.last = torch.relu(x)
            return self.last

    class KeepsDetached(torch.nn.Module):
        def forward(self, x):
            y = torch.relu(x)
            self.last = y.detach()
            return y

    class Param(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))

        def forward(self, x):
            return self.w

    class Mixed(torch.nn.Module):
        def forward(self, x):
            return x * 2, x, torch.relu(x).view(-1), glob

    copies = [0]
    clone = torch.Tensor.clone

    def counting(self, *a, **k):
        copies[0] += 1
        return clone(self, *a, **k)
    torch.Tensor.clone = counting
    try:
        for model, want in ((Fresh(), 0), (Keeps(), 1), (KeepsDetached(), 1), (Param(), 1), (Mixed(), 3)):
            copies[0] = 0
            out = jobs._reference(model, [x], "cpu")
            check(copies[0] == want, f"{type(model).__name__}: {copies[0]} copies of its outputs, want {want}")
            kept = getattr(model, "last", None)
            for o in out:
                shared = [o.data_ptr() == t.data_ptr() for t in [x, glob] + list(model.parameters())
                          + ([kept] if kept is not None else [])]
                check(not any(shared), f"{type(model).__name__}: an answer shares memory with what the Model holds")
    finally:
        torch.Tensor.clone = clone
    print("answers kept ok")


def modelnew_agreement() -> None:
    """The exported ModelNew's outputs are checked against the candidate's a slice at a time."""
    whole = cmp._SLICE
    cmp._SLICE = 7  # several slices below
    try:
        a = torch.randn(5, 9)
        check(jobs._disagreement([a.clone()], [a], 1e-4, 1e-4) is None, "equal outputs agree")
        nan = a.clone()
        nan[4, 8] = float("nan")
        check(jobs._disagreement([nan.clone()], [nan], 1e-4, 1e-4) is None, "NaN meets NaN")
        b = a.clone()
        b[3, 2] += 1.0
        why = jobs._disagreement([b], [a], 1e-4, 1e-4)
        check(why is not None and "output 0" in why and "1 of 45 values differ" in why, f"one value off: {why}")
        why = jobs._disagreement([a[:4]], [a], 1e-4, 1e-4)
        check(why is not None and "[4, 9]" in why, f"a shape off: {why}")
        why = jobs._disagreement([a], [a, a], 1e-4, 1e-4)
        check(why is not None and "returned 1 outputs" in why, f"an output missing: {why}")
    finally:
        cmp._SLICE = whole
    print("modelnew agreement ok")


fingerprints("cpu")
if torch.cuda.is_available():
    fingerprints("cuda")
footprints()
room_waits()
scaling()
answers_kept()
modelnew_agreement()
