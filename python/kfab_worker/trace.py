"""Op-class detection for KernelBench-format tasks: the Model is traced (make_fx, with PyTorch's core
ATen decompositions plus softmax, log-softmax and layer norm broken down) into an ATen graph, and the
graph is matched against what kfab's fused row programs express (src/tuner/program.h): chains of
pointwise ops, reductions over the last dimension, a gather of one column per row, and means or
sums over everything. What matches comes back as a formula the tuner generates kernels from; what
does not comes back with the first node that did not fit.

Values have a class relative to the main shape S (the first floating-point input of the highest
rank): E (shape S), R (S without its last dimension, kept or not), C ([S[-1]]) or K (one element)."""
from __future__ import annotations

import math
import operator
import re

import torch

from . import task as taskmod

aten = torch.ops.aten


class Unsupported(Exception):
    """What did not fit; `node`, where known, the graph node at which it did not (a plan of several
    programs cuts its stage there)."""

    def __init__(self, msg: str, node=None):
        super().__init__(msg)
        self.node = node


def _decompositions():
    from torch._decomp import core_aten_decompositions, get_decompositions
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([aten._softmax, aten._log_softmax, aten.softplus, aten.mish, aten.silu, aten.hardtanh,
                                     aten.leaky_relu, aten.elu, aten.hardsigmoid, aten.hardswish, aten.mse_loss,
                                     aten.huber_loss, aten.smooth_l1_loss]))
    # kept whole: the matcher has them (their decompositions go through prims with shape constants)
    for op in (aten.gelu.default, aten.native_layer_norm.default, aten.var_mean.correction, aten.var.correction):
        table.pop(op, None)
    return table


_UNARY = {
    aten.neg.default: "neg", aten.abs.default: "abs", aten.exp.default: "exp", aten.log.default: "log",
    aten.log1p.default: "log1p", aten.expm1.default: "expm1", aten.tanh.default: "tanh", aten.sigmoid.default: "sigmoid",
    aten.relu.default: "relu", aten.sqrt.default: "sqrt", aten.rsqrt.default: "rsqrt", aten.erf.default: "erf",
    aten.reciprocal.default: "reciprocal", aten.sin.default: "sin", aten.cos.default: "cos", aten.floor.default: "floor",
    aten.ceil.default: "ceil", aten.sign.default: "sign", aten.logical_not.default: "not", aten.silu.default: "silu",
    aten.isnan.default: "isnan",
}
_BINARY = {
    "add": "+", "sub": "-", "mul": "*", "div": "/",
}
_CALL2 = {"maximum": "max", "minimum": "min", "pow": "pow", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq",
          "ne": "ne", "logical_and": "and", "logical_or": "or", "bitwise_and": "and", "bitwise_or": "or"}
_VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "alias", "clone", "contiguous", "detach",
          "lift_fresh_copy", "_to_copy", "to", "copy", "view_as", "expand_as", "flatten"}
# the ops that give another view of the same memory, no copy: a GEMM operand may be one of an input
_RESHAPES = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze"}  # the same elements in the same order
_LAYOUT_VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "permute", "t", "transpose", "alias"}


def _num(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    v = float(v)
    if math.isinf(v):
        return "inf" if v > 0 else "(-inf)"
    if math.isnan(v):
        return "nan"
    s = repr(v)
    return f"({s})" if v < 0 else s


class _Matcher:
    def __init__(self, gm, example: list, n_inputs: int, shape: list | None = None, frame: list | None = None,
                 gemm: bool = True):
        self.gm = gm
        # A stage of a plan whose main shape is its output's with the dimensions of size 1 left out (a
        # [M, 1] row minimum plus a [1, N, 1, 1] bias: a [1, N, M, 1] output, seen as [N, M]): values are
        # classed by the dimensions of `frame` along which they vary when broadcast to it.
        self.frame = list(frame) if frame is not None else None
        self.lines: list[str] = []
        self.val: dict = {}     # node -> formula expression (a name or a literal)
        self.cls: dict = {}     # node -> E, R, C, K
        self.tuple: dict = {}   # node -> list of (expr, cls) for multi-output nodes
        # arange(start, end, step) nodes, until a view makes them a row's column index ([1, n]) or a
        # column of row indices ([rows, 1]): node -> (start, step, length)
        self.aranges: dict = {}
        # inputs whose class a view settled otherwise than their shape (a [rows] vector unsqueezed to
        # [rows, 1] where rows == n): placeholder -> class; the caller updates its inputs' list
        self.reclassed: dict = {}
        self.after_all: set = set()  # nodes whose value depends on a reduction over everything
        floats = [t for t in example if isinstance(t, torch.Tensor) and t.is_floating_point()]
        if not floats:
            raise Unsupported("no floating-point input")
        self.S = list(shape) if shape is not None else list(max(floats, key=lambda t: t.dim()).shape)
        if not self.S:
            raise Unsupported("the inputs are scalars")
        self.n_inputs = n_inputs
        # A row is the last k dimensions of S: k > 1 where every reduction of an S-shaped value (a layer
        # norm over normalized_shape (C, H, W), a mean over dims (1, 2, 3)) covers the same trailing
        # dimensions. The program then sees S as [prod(S[:-k]), prod(S[-k:])].
        self.k = 1 if shape is not None else _row_dims(gm, self.S)
        if self.frame is not None and len(self.S) > 2:
            raise Unsupported(f"a stage of shape {self.frame}: more than two dimensions of size above 1")
        # A GroupNorm over a GEMM's [M, N] product: the program's rows are its groups (each product row
        # splits into `groups` rows of N / groups), per-channel [N] inputs are read at (row % groups) *
        # n + c, and no other reduction over the row may appear (its rows are no longer the product's).
        self.groups = 1
        if shape is not None and gemm and len(self.S) == 2:
            gns = [n for n in gm.graph.nodes if n.op == "call_function" and _base(n) == "native_group_norm"]
            sizes = {int(n.args[6]) for n in gns}
            if len(sizes) > 1:
                raise Unsupported(f"GroupNorms of {sorted(sizes)} groups after one GEMM")
            if sizes:
                g = sizes.pop()
                if g < 1 or self.S[1] % g != 0:
                    raise Unsupported(f"a GroupNorm of {g} groups over {self.S[1]} channels")
                self.groups = g

    @property
    def lead(self) -> list:
        return self.S[:-self.k]

    @property
    def row(self) -> list:
        return self.S[-self.k:]

    def flat_shape(self) -> list:
        """S as the program sees it: [rows, n] when a row is several dimensions, else S."""
        return self.S if self.k == 1 else [math.prod(self.lead), math.prod(self.row)]

    def frame_cls(self, shape) -> str | None:
        """The class of a value of `shape` broadcast to the frame: by which of the main shape's
        dimensions (the frame's of size above 1) it varies along; None where it does not broadcast."""
        F = self.frame
        if len(shape) > len(F):
            return None
        padded = [1] * (len(F) - len(shape)) + list(shape)
        big = [i for i, d in enumerate(F) if d != 1]
        if any(p not in (1, d) for p, d in zip(padded, F)):
            return None
        varies = [j for j, i in enumerate(big) if padded[i] != 1]
        if not varies:
            return "K"
        if len(big) == 1:
            return "E"
        return {(0,): "R", (1,): "C", (0, 1): "E"}[tuple(varies)]

    def shape_cls(self, shape, integer=False) -> str | None:
        shape = list(shape)
        S = self.S
        if self.frame is not None:
            fc = self.frame_cls(shape)
            if fc is not None and not (integer and fc != "R"):
                return fc
        if shape == S:
            return "E"
        if math.prod(shape) == 1:
            return "K"
        lead, row = self.lead, self.row
        core = list(shape)
        while core and core[0] == 1 and len(core) > 1:
            core = core[1:]
        if not integer and core == row:
            return "C"
        if shape == lead or shape == lead + [1] * self.k:
            return "R"
        if core == row:
            return "C"
        # a row of several dimensions with its leading dimensions merged or split (an instance norm's
        # [1, B * C, H, W] view of [B, C, H, W]): the same elements in the same order
        if self.k > 1 and not integer and math.prod(shape) == math.prod(S) and list(shape[-self.k:]) == self.row:
            return "E"
        # the main shape with dimensions of size 1 put in or taken out (an unsqueeze before an instance
        # norm), or with its rows split over several leading dimensions (a 3-D tensor times a matrix):
        # the same elements in the same order
        if [d for d in shape if d != 1] == [d for d in S if d != 1] and not integer:
            return "E"
        if len(S) == 2 and len(shape) > 2 and shape[-1] == S[-1] and math.prod(shape[:-1]) == S[0] and not integer:
            return "E"
        nz = [d for d in shape if d != 1]  # the same, size-1 dimensions aside (an einsum's views of a product)
        if len(S) == 2 and len(nz) >= 2 and nz[-1] == S[-1] and math.prod(nz[:-1]) == S[0] and not integer:
            return "E"
        return None

    def after_all_check(self, node) -> None:
        """A value computed from a reduction over everything (allsum, allmean) is known only after the whole
        grid: a scalar may carry it to an output, but a per-element, per-row or per-column value that reads
        it (x / a Frobenius norm) cannot be in the same program; the refusal names the node, where a plan
        of several programs cuts (the scalar then a buffer the next program reads)."""
        if node in self.after_all or any(a in self.after_all for a in node.all_input_nodes):
            if self.cls.get(node, "K") != "K":
                raise Unsupported(f"{node.name} reads a reduction over everything per element", node)
            self.after_all.add(node)

    def emit(self, node, expr: str, cls: str) -> None:
        name = f"v{len(self.lines)}"
        self.lines.append(f"{name} = {expr}")
        self.val[node] = name
        self.cls[node] = cls

    def arg(self, a) -> tuple[str, str]:
        if isinstance(a, torch.fx.Node):
            if a in self.aranges:
                raise Unsupported(f"{a.name}: an arange used other than as a row's column indices or a column of row indices")
            if a not in self.val:
                raise Unsupported(f"{a.name} is used before it is computed")
            if self.val[a] is None:
                raise Unsupported(f"{a.name}: the indices of a max or min over a dimension")
            return self.val[a], self.cls[a]
        if isinstance(a, (int, float, bool)):
            return _num(a), "K"
        raise Unsupported(f"argument {a!r}")

    @staticmethod
    def join(*cs: str) -> str:
        s = set(cs) - {"K"}
        if not s:
            return "K"
        if "E" in s or ("R" in s and "C" in s):
            return "E"
        return s.pop()

    def out_shape(self, node):
        v = node.meta.get("val")
        if isinstance(v, torch.Tensor):
            return list(v.shape), v.dtype
        return None, None

    def reduce(self, node, kind: str, x, dims, keepdim) -> None:
        xe, xc = self.arg(x)
        nd = len(x.meta["val"].shape)
        if dims is None or list(dims) == []:
            dims = list(range(nd))
        dims = sorted(d % nd if nd else 0 for d in dims)
        shape = list(x.meta["val"].shape)
        if xc in ("R", "K") and all(shape[d] == 1 for d in dims):
            # over dimensions of size 1 (a max over the [B, 1] a row sum left): the value itself
            self.val[node], self.cls[node] = xe, xc
            return
        if xc == "E" and dims == list(range(nd - self.k, nd)):
            self.whole_row(node)
            self.emit(node, f"row{kind}({xe})", "R")
        elif xc in ("E", "R") and dims == list(range(nd)):
            if kind not in ("sum", "mean"):
                raise Unsupported(f"{node.target}: a {kind} over everything")
            self.emit(node, f"all{kind}({xe})", "K")
            self.after_all.add(node)
        else:
            raise Unsupported(f"{node.target} over dims {dims} of a {xc}-class value (rows reduce over the last dimension)")

    def whole_row(self, node) -> None:
        """Refuses a reduction over the product's whole row in a program whose rows are a GroupNorm's groups."""
        if self.groups > 1:
            raise Unsupported(f"{node.target} over the product's row beside a GroupNorm of {self.groups} groups")

    def normalize(self, node, xe: str, eps, w, b, over: str) -> None:
        """y = (x - mean) * rsqrt(var + eps) [* w] [+ b], the mean and the biased variance over the row
        (`over` "row": a layer norm, a GroupNorm's group, an instance norm) or over the rows (`over` "col":
        a training batch norm's statistics); the node's outputs are (y, mean, rstd)."""
        cls = "R" if over == "row" else "C"
        self.emit(node, f"{over}mean({xe})", cls)
        mean = self.val[node]
        self.emit(node, f"({xe} - {mean})", "E")
        d = self.val[node]
        self.emit(node, f"rsqrt({over}mean({d} * {d}) + {_num(eps)})", cls)
        rstd = self.val[node]
        self.affine(node, f"({d} * {rstd})", w, b)
        self.tuple[node] = [(self.val[node], "E"), (mean, cls), (rstd, cls)]

    def affine(self, node, y: str, w, b) -> None:
        """y [* w] [+ b], the weight and bias optional."""
        if w is not None:
            y = f"({y} * {self.arg(w)[0]})"
        if b is not None:
            y = f"({y} + {self.arg(b)[0]})"
        self.emit(node, y, "E")

    def batch_norm(self, node, base: str, args) -> None:
        """BatchNorm over the channels of a [rows, C] value: in training, the statistics of the batch
        (column reductions over the rows, the variance biased as the op normalises with); in eval, the
        running ones (per-column inputs). The running statistics' update, a side effect on the module's
        buffers that no output shows, is not made."""
        x, w, b, rm, rv = args[:5]
        if base == "_native_batch_norm_legit_no_training":
            training, eps = False, args[6]
        else:
            training, eps = bool(args[5]), args[7]
        xe, xc = self.arg(x)
        if self.groups > 1:
            raise Unsupported(f"{node.target} beside a GroupNorm of {self.groups} groups (the program's rows are groups)")
        xs = list(x.meta["val"].shape)
        if (xc == "E" and training and len(xs) >= 3 and xs[0] == 1 and xs[1] == math.prod(self.lead)
                and math.prod(xs[2:]) == math.prod(self.row) and xs[-1] == self.row[-1] and w is None and b is None):
            # an instance norm as torch writes it: a batch norm of a [1, rows, .., n] view whose channels
            # are the rows (a row one or several trailing dimensions: an InstanceNorm2d's H, W): each row
            # normalised over its own elements
            self.normalize(node, xe, eps, None, None, "row")
            return
        if xc != "E" or self.k != 1 or len(xs) != 2:
            raise Unsupported(f"{node.target} of a {xc}-class value of shape {list(x.meta['val'].shape)} (channels as the row's columns only)")
        if training:
            self.normalize(node, xe, eps, w, b, "col")
        else:
            mean, _ = self.arg(rm)
            self.emit(node, f"({xe} - {mean})", "E")
            d = self.val[node]
            self.emit(node, f"rsqrt({self.arg(rv)[0]} + {_num(eps)})", "C")
            rstd = self.val[node]
            self.affine(node, f"({d} * {rstd})", w, b)
            self.tuple[node] = [(self.val[node], "E"), (mean, "C"), (rstd, "C")]
        if base == "_native_batch_norm_legit_functional":
            self.tuple[node] = self.tuple[node] + [None, None]

    def visit(self, node) -> None:
        t = node.target
        name = getattr(t, "__name__", str(t)).split(".")[0]
        packet = getattr(t, "_overloadpacket", None)
        base = packet.__name__ if packet is not None else name
        args, kw = node.args, node.kwargs
        shape, dtype = self.out_shape(node)
        if t is operator.getitem:
            src, k = args
            if src not in self.tuple:
                raise Unsupported(f"getitem of {src.name}")
            if self.tuple[src][k] is None:  # the indices of a max or min: an error only where something uses them
                self.val[node], self.cls[node] = None, "E"
                return
            expr, cls = self.tuple[src][k]
            self.val[node], self.cls[node] = expr, cls
            return
        if t in _UNARY:
            x, c = self.arg(args[0])
            self.emit(node, f"{_UNARY[t]}({x})", c)
            return
        if base == "gelu":
            x, c = self.arg(args[0])
            approx = kw.get("approximate", args[1] if len(args) > 1 else "none")
            self.emit(node, f"gelu_{'tanh' if approx == 'tanh' else 'erf'}({x})", c)
            return
        if base in _BINARY:
            if kw.get("rounding_mode") is not None:
                raise Unsupported(f"{t} with rounding_mode")
            (a, ca), (b, cb) = self.arg(args[0]), self.arg(args[1])
            alpha = kw.get("alpha", 1)
            if alpha != 1:
                b = f"({_num(alpha)} * {b})"
            self.emit(node, f"({a} {_BINARY[base]} {b})", self.join(ca, cb))
            return
        if base == "rsub":
            (a, ca), (b, cb) = self.arg(args[0]), self.arg(args[1])
            self.emit(node, f"({b} - {a})", self.join(ca, cb))
            return
        if base in _CALL2:
            (a, ca), (b, cb) = self.arg(args[0]), self.arg(args[1])
            self.emit(node, f"{_CALL2[base]}({a}, {b})", self.join(ca, cb))
            return
        if base in ("clamp", "clamp_min", "clamp_max"):
            x, c = self.arg(args[0])
            lo = args[1] if base != "clamp_max" else None
            hi = (args[2] if len(args) > 2 else kw.get("max")) if base == "clamp" else (args[1] if base == "clamp_max" else None)
            if base == "clamp" and lo is None:
                lo = kw.get("min")
            if lo is not None:
                lv, lc = self.arg(lo)
                x, c = f"max({x}, {lv})", self.join(c, lc)
            if hi is not None:
                hv, hc = self.arg(hi)
                x, c = f"min({x}, {hv})", self.join(c, hc)
            self.emit(node, x, c)
            return
        if base == "where":
            (cnd, c0), (a, c1), (b, c2) = self.arg(args[0]), self.arg(args[1]), self.arg(args[2])
            self.emit(node, f"where({cnd}, {a}, {b})", self.join(c0, c1, c2))
            return
        if base in ("scalar_tensor", "full") and shape is not None and math.prod(shape) == 1:
            self.emit(node, _num(args[-1] if base == "full" else args[0]), "K")
            return
        if base in ("sum", "mean", "amax", "amin"):
            kind = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min"}[base]
            dims = args[1] if len(args) > 1 else kw.get("dim")
            if isinstance(dims, int):
                dims = [dims]
            self.reduce(node, kind, args[0], dims, kw.get("keepdim", args[2] if len(args) > 2 else False))
            return
        if base in ("max", "min") and len(args) >= 2 and isinstance(args[1], int):
            # max/min over a dimension: its values as the reduction (amax, amin); its indices are not taken
            keep = args[2] if len(args) > 2 else kw.get("keepdim", False)
            self.reduce(node, base, args[0], [args[1]], keep)
            self.tuple[node] = [(self.val[node], self.cls[node]), None]
            return
        if base == "linalg_vector_norm":
            self.whole_row(node)
            x = args[0]
            order = args[1] if len(args) > 1 else kw.get("ord", 2)
            dims = args[2] if len(args) > 2 else kw.get("dim")
            keep = args[3] if len(args) > 3 else kw.get("keepdim", False)
            if order not in (1, 2, 1.0, 2.0) or (kw.get("dtype") not in (None, torch.float32)):
                raise Unsupported(f"{t} of order {order}")
            xe, xc = self.arg(x)
            nd = len(x.meta["val"].shape)
            dims = [dims] if isinstance(dims, int) else list(range(nd)) if not dims else list(dims)
            dims = sorted(d % nd for d in dims)
            # the norm: a sum over the row of |x| or x * x, then (order 2) its square root
            inner = f"abs({xe})" if order in (1, 1.0) else f"({xe} * {xe})"
            if xc in ("E", "R") and dims == list(range(nd)) and (self.k == 1 or nd > self.k):
                # over everything (a Frobenius norm): a sum over all of it, then its square root
                self.emit(node, f"allsum({inner})" if order in (1, 1.0) else f"sqrt(allsum({inner}))", "K")
                self.after_all.add(node)
                return
            if xc != "E" or dims != list(range(nd - self.k, nd)):
                raise Unsupported(f"{t} over dims {dims} of a {xc}-class value (rows reduce over the last dimension)")
            self.emit(node, f"rowsum({inner})" if order in (1, 1.0) else f"sqrt(rowsum({inner}))", "R")
            return
        if base == "native_layer_norm":
            self.whole_row(node)
            x, norm_shape, w, b, eps = args[:5]
            xe, xc = self.arg(x)
            if xc != "E" or list(norm_shape) != self.row:
                raise Unsupported(f"layer norm over {list(norm_shape)}, not the row {self.row}")
            self.normalize(node, xe, eps, w, b, "row")
            return
        if base == "native_group_norm":
            x, w, b, eps = args[0], args[1], args[2], args[7]
            xe, xc = self.arg(x)
            if self.groups <= 1 or int(args[6]) != self.groups or xc != "E" or int(args[5]) != 1:
                raise Unsupported(f"{t} other than over the channels of a GEMM's [M, N] product")
            # a row is one group: its mean and (biased) variance are the row's
            self.normalize(node, xe, eps, w, b, "row")
            return
        if base in ("native_batch_norm", "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training"):
            self.batch_norm(node, base, args)
            return
        if base in ("var_mean", "var"):
            self.whole_row(node)
            x = args[0]
            dims = args[1] if len(args) > 1 else kw.get("dim")
            xe, xc = self.arg(x)
            nd = len(x.meta["val"].shape)
            if xc != "E" or dims is None or sorted(d % nd for d in dims) != list(range(nd - self.k, nd)):
                raise Unsupported(f"{t} over other than the row's dimensions")
            corr = kw.get("correction", 1)
            corr = 1 if corr is None else corr
            self.emit(node, f"rowmean({xe})", "R")
            mean = self.val[node]
            scale = "" if corr == 0 else f" * (ncols / (ncols - {_num(corr)}))"
            self.emit(node, f"rowmean(({xe} - {mean}) * ({xe} - {mean})){scale}", "R")
            var = self.val[node]
            self.tuple[node] = [(var, "R"), (mean, "R")]
            if base == "var":
                self.val[node] = var
            return
        if base == "gather":
            self.whole_row(node)
            x, dim, idx = args[0], args[1], args[2]
            xe, xc = self.arg(x)
            ie, ic = self.arg(idx)
            nd = len(x.meta["val"].shape)
            if xc != "E" or self.k != 1 or dim % nd != nd - 1 or ic not in ("R", "K") or list(idx.meta["val"].shape)[-1:] != [1]:
                raise Unsupported("gather other than one column per row")
            self.emit(node, f"pick({xe}, {ie})", "R")
            return
        if base == "arange":
            # arange(end) or arange(start, end[, step]) of integers: an index, for a triu/tril mask
            nums = [a for a in args if isinstance(a, (int, float))]
            start, end, step = (0, nums[0], 1) if len(nums) == 1 else (nums[0], nums[1], nums[2] if len(nums) > 2 else 1)
            if len(nums) not in (1, 2, 3) or any(not isinstance(v, int) for v in (start, end, step)) or step == 0:
                raise Unsupported(f"{t} of {args}")
            self.aranges[node] = (start, step, len(range(start, end, step)))
            return
        if base in _VIEWS and isinstance(args[0], torch.fx.Node) and args[0] in self.aranges and base == "unsqueeze":
            start, step, length = self.aranges[args[0]]
            idx = None
            if self.groups > 1 or self.k != 1 or len(self.S) != 2:
                raise Unsupported("an arange index beside a grouped or multi-dimensional row")
            if shape == [1, length] and length == self.S[1]:
                idx, c = "colidx", "C"
            elif shape == [length, 1] and length == self.S[0]:
                idx, c = "rowidx", "R"
            if idx is None:
                raise Unsupported(f"an arange of {length} unsqueezed to {shape}, neither a row's columns nor the rows of {self.S}")
            expr = idx if step == 1 else f"({idx} * {_num(step)})"
            self.emit(node, expr if start == 0 else f"({expr} + {_num(start)})", c)
            return
        if base == "unsqueeze" and isinstance(args[0], torch.fx.Node) and args[0].op == "placeholder" \
                and self.cls.get(args[0]) == "C" and len(self.S) == 2 and self.k == 1 and self.groups == 1 \
                and shape == [self.S[0], 1] and len(args[0].users) == 1:
            # a [rows] input unsqueezed to [rows, 1] (diag(A) @ B as A.unsqueeze(1) * B) where rows == n made
            # its shape read as a column: it is one value per row
            self.cls[args[0]] = "R"
            self.reclassed[args[0]] = "R"
            self.val[node], self.cls[node] = self.val[args[0]], "R"
            return
        if base == "permute" and isinstance(args[0], torch.fx.Node):
            # a permute that moves only dimensions of size 1 keeps every element where it was: a view
            src = list(args[0].meta["val"].shape)
            order = [d for d in args[1] if src[d] != 1]
            if order != sorted(order):
                raise Unsupported(f"{t} of {src} by {list(args[1])}: it moves the data")
            x, c = self.arg(args[0])
            if shape is None or self.shape_cls(shape) != c:
                raise Unsupported(f"{t} turns a {c}-class value into shape {shape}, which the row structure cannot follow")
            self.val[node], self.cls[node] = x, c
            return
        if base in _VIEWS:
            x, c = self.arg(args[0])
            if shape is None:
                raise Unsupported(f"{t} without a tensor result")
            if dtype is not None and not (dtype.is_floating_point or dtype in (torch.int64, torch.int32, torch.bool)):
                raise Unsupported(f"{t} to {dtype}")
            if dtype is not None and dtype.is_floating_point and dtype != torch.float32:
                raise Unsupported(f"{t} to {dtype}")
            sc = self.shape_cls(shape)
            ok = sc == c or c == "K" or (sc == "E" and c in ("R", "C"))  # a broadcast keeps the value
            if not ok:
                raise Unsupported(f"{t} turns a {c}-class value into shape {shape}, which the row structure cannot follow")
            self.val[node], self.cls[node] = x, c
            return
        raise Unsupported(f"{t} (node {node.name})")


def _row_dims(gm, S: list) -> int:
    """How many trailing dimensions of S a row spans: k when every reduction of an S-shaped value
    covers exactly the last k dimensions (k > 1), else 1 (rows reduce over the last dimension)."""
    nd = len(S)
    ks = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
            continue
        base = _base(node)
        v = node.args[0].meta.get("val")
        if not isinstance(v, torch.Tensor) or list(v.shape) != S:
            continue
        if base == "native_layer_norm":
            ks.add(len(node.args[1]))
            continue
        if base == "view" and len(node.users) == 1 and _base(next(iter(node.users))) == "native_batch_norm":
            # an instance norm: a training batch norm of x viewed as [1, rows, *row] (its channels the rows)
            shape = list(node.args[1])
            if len(shape) >= 3 and shape[0] == 1 and math.prod(shape) == math.prod(S) and shape[2:] == S[nd - len(shape) + 2:]:
                ks.add(len(shape) - 2)
            continue
        if base not in ("sum", "mean", "amax", "amin", "var", "var_mean", "linalg_vector_norm"):
            continue
        at = 2 if base == "linalg_vector_norm" else 1
        dims = node.args[at] if len(node.args) > at else node.kwargs.get("dim")
        if isinstance(dims, int):
            dims = [dims]
        if not dims:
            continue  # over everything: not a row
        dims = sorted(d % nd for d in dims)
        ks.add(len(dims) if dims == list(range(nd - len(dims), nd)) else 0)
    k = ks.pop() if len(ks) == 1 else 1
    return k if 1 < k < nd else 1


_COPIES = {"clone", "contiguous", "alias", "detach", "_to_copy", "lift_fresh_copy"}


def _single_op_kind(gm, example: list):
    """Data movement a row program cannot state, but a dedicated template can: a batched transpose
    ([B, M, N] -> [B, N, M], or NCHW -> NHWC), the Model's one op on its one f32 input."""
    if len(example) != 1 or not example[0].is_floating_point() or example[0].dtype != torch.float32:
        return None
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    core = [n for n in ops if getattr(getattr(n.target, "_overloadpacket", None), "__name__", "") not in _COPIES]
    if len(core) != 1:
        return None
    node = core[0]
    base = getattr(getattr(node.target, "_overloadpacket", None), "__name__", "")
    x = example[0]
    nd = x.dim()
    kind = None
    if base == "permute" and list(node.args[1]) in ([0, 2, 1], [0, 2, 3, 1]):
        kind = "transpose"
    if kind is None:
        return None
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if len(outs) != 1:
        return None
    return {"supported": True, "kind": kind, "formula": "", "inputs": [{"name": "in0", "cls": "E", "integer": False, "i32": False}],
            "outputs": ["out0"], "shape": list(x.shape)}


def _base(node) -> str:
    packet = getattr(node.target, "_overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(node.target, "__name__", str(node.target))


_PRODUCTS = {"mm", "addmm", "bmm", "baddbmm", "convolution", "_convolution", "matmul", "linear", "dot", "mv"}


def _find_gemm(gm):
    """The Model's one matrix product, when it is a 2-D GEMM of two of its inputs (or weights), either
    possibly transposed (a Linear layer's weight; KernelBench's A.T @ B): (node, A, B, B transposed,
    bias, A transposed) with A and B placeholders; None when the graph has no product."""
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    prods = [n for n in ops if _base(n) in _PRODUCTS]
    if not prods:
        return None
    if len(prods) > 1:
        counts: dict = {}
        for n in prods:
            counts[str(n.target)] = counts.get(str(n.target), 0) + 1
        kinds = ", ".join(f"{c} {op}" for op, c in sorted(counts.items(), key=lambda kv: -kv[1]))
        raise Unsupported(f"{len(prods)} matrix products ({kinds}): the GEMM template takes one")
    node = prods[0]
    base = _base(node)
    # a bmm of one batch is a GEMM; of several, a batched one (each batch's GEMM on its own slices)
    batched = base == "bmm" and node.meta["val"].shape[0] != 1
    if base not in ("mm", "addmm", "bmm"):
        raise Unsupported(f"{node.target} (node {node.name}): GEMM epilogues take a 2-D matrix product (aten.mm/addmm)")
    bias = None
    if base == "addmm":
        bias, a, b = node.args[:3]
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            raise Unsupported(f"{node.target} with beta/alpha")
    else:
        a, b = node.args[:2]

    def operand(x, side):
        if isinstance(x, torch.fx.Node) and x.op == "placeholder":
            if batched and x.meta["val"].dim() != 3:
                raise Unsupported(f"a batched GEMM of a {x.meta['val'].dim()}-D {side} operand")
            return x, False
        # a chain of views and permutes of an input (a Linear's transposed weight, A.T, a 3-D or 4-D tensor
        # whose leading dimensions are the rows, an einsum's unsqueezes and permutes around a bmm of one
        # batch): what the product reads is the input's own memory as [rows, cols], row-major or transposed,
        # as the traced tensor's strides say
        src = x
        while isinstance(src, torch.fx.Node) and src.op == "call_function" and _base(src) in _LAYOUT_VIEWS:
            src = src.args[0]
        if src is not x and isinstance(src, torch.fx.Node) and src.op == "placeholder":
            v, p = x.meta["val"], src.meta["val"]
            shape, stride = list(v.shape), list(v.stride())
            if batched:  # [batch, r, c], the batches one after another in the input's memory
                ok = len(shape) == 3 and p.dim() == 3 and (shape[0] == 1 or stride[0] == shape[1] * shape[2])
                shape, stride = (shape[1:], stride[1:]) if ok else ([], [])
            while len(shape) > 2 and shape[0] == 1:
                shape, stride = shape[1:], stride[1:]
            # the kernel takes a left operand of 2 or more dimensions (its leading ones the rows) and a right
            # one of exactly 2 (3 for a batched product); a transposed one of exactly that rank
            rank_ok = p.dim() == (3 if batched else 2) or (side == "left" and not batched and p.dim() > 2)
            if len(shape) == 2 and v.storage_offset() == 0 and v.numel() == p.numel() and rank_ok:
                r, c = shape
                if stride[1] == 1 and (stride[0] == c or r == 1):
                    return src, False
                if stride[0] == 1 and (stride[1] == r or c == 1) and p.dim() == (3 if batched else 2):
                    return src, True
        raise Unsupported(f"a GEMM of a computed {side} operand ({getattr(x, 'name', x)}): the template multiplies the Model's inputs or weights")

    pa, trans_a = operand(a, "left")
    pb, trans = operand(b, "right")
    for p in (pa, pb):
        if p.meta["val"].dtype != torch.float32:
            raise Unsupported(f"a GEMM operand is {p.meta['val'].dtype}")
    return node, pa, pb, trans, bias, trans_a, batched


def _matrix_vector_as_rows(gm) -> None:
    """A matrix times one column (aten.mm of A [M, K] by B [K, 1]: KernelBench's level1_4, 2048 x 1048576)
    is memory-bound and would leave a GEMM's tiles nearly empty: rewritten in the graph as the row program
    sum(A * B.view(1, K), dim=1, keepdim=True), one pass over A at the memory's speed. The new nodes'
    values are computed on the caller's fake tensors (no memory)."""
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or _base(node) != "mm":
            continue
        a, b = node.args[:2]
        va = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        vb = b.meta.get("val") if isinstance(b, torch.fx.Node) else None
        if not isinstance(va, torch.Tensor) or not isinstance(vb, torch.Tensor) or va.dim() != 2 or vb.dim() != 2 or vb.shape[1] != 1:
            continue
        k = int(vb.shape[0])
        with gm.graph.inserting_before(node):
            row = gm.graph.call_function(torch.ops.aten.view.default, (b, [1, k]))
            prod = gm.graph.call_function(torch.ops.aten.mul.Tensor, (a, row))
            total = gm.graph.call_function(torch.ops.aten.sum.dim_IntList, (prod, [1], True))
        row.meta["val"] = vb.view(1, k)
        prod.meta["val"] = va * row.meta["val"]
        total.meta["val"] = prod.meta["val"].sum(dim=1, keepdim=True)
        node.replace_all_uses_with(total)
        gm.graph.erase_node(node)
    gm.graph.lint()


def _unused(n) -> bool:
    """Whether nothing but dead nodes read n (a max pooling's indices, squeezed and dropped)."""
    return all(_unused(u) for u in n.users)


def _with_users(n) -> list:
    """n and every node that reads it, transitively."""
    out = [n]
    for u in n.users:
        out += _with_users(u)
    return out


def _pool_window(u, b: str, S: list):
    """The window k of a pooling node u over the last dimension of an [M, N] product made 3-D or 4-D (window
    k, stride k, no padding, dilation 1, floor mode; an average without a divisor override), else None."""
    a = list(u.args) + [None] * 7
    kernel = list(a[1]) if isinstance(a[1], (list, tuple)) else [a[1]]
    stride = list(a[2]) if isinstance(a[2], (list, tuple)) and a[2] else kernel
    pad = list(a[3]) if isinstance(a[3], (list, tuple)) else [a[3] or 0]
    if b.startswith("avg"):
        ceil, dil, extra = bool(a[4]) or bool(u.kwargs.get("ceil_mode", False)), [1], a[6] if b == "avg_pool2d" else None
    else:  # max_pool(1|2)d(_with_indices): self, kernel, stride, padding, dilation, ceil_mode
        dil = list(a[4]) if isinstance(a[4], (list, tuple)) else [a[4] or 1]
        ceil, extra = bool(a[5]) or bool(u.kwargs.get("ceil_mode", False)), None
    want = [1, kernel[-1]] if "2d" in b else [kernel[-1]]
    if kernel != want or stride != want or any(pad) or any(d != 1 for d in dil) or ceil or extra is not None or kernel[-1] < 2 \
            or S[-1] % kernel[-1]:
        return None
    return kernel[-1]


_POOLS = {"avg_pool1d": "avg", "avg_pool2d": "avg", "max_pool1d": "max", "max_pool2d": "max", "max_pool1d_with_indices": "max",
          "max_pool2d_with_indices": "max"}


def _pooled_product(node):
    """The product's columns pooled in windows: a GEMM's [M, N] product whose only use is a chain of views,
    one average or max pooling over its last dimension (window k, stride k, no padding, floor mode: an
    nn.AvgPool1d or nn.MaxPool1d over a Linear's outputs; a max pooling's indices unused), then views back
    to [M, N / k]. (k, the chain's nodes, the chain's last node, [M, N / k], "avg" or "max"), or None."""
    S = list(node.meta["val"].shape)
    if len(S) != 2:
        return None
    chain, x, k, kind = [], node, None, None
    views = ("unsqueeze", "view", "_unsafe_view", "reshape", "squeeze")
    while len(x.users) == 1:
        u = next(iter(x.users))
        b = _base(u)
        if b in _POOLS and k is None:
            k, kind = _pool_window(u, b, S), _POOLS[b]
            if k is None:
                return None
            if b.endswith("with_indices"):  # (values, indices): the values read on, the indices read by nothing
                vals = [w for w in u.users if w.target is operator.getitem and w.args[1] == 0]
                idx = [w for w in u.users if w.target is operator.getitem and w.args[1] == 1]
                if len(vals) != 1 or len(vals) + len(idx) != len(u.users) or not all(_unused(w) for w in idx):
                    return None
                chain.append(u)
                for w in idx:
                    chain += _with_users(w)
                u = vals[0]
            chain.append(u)
            x = u
            if list(u.meta["val"].shape) == [S[0], S[1] // k]:
                break
            continue
        shape = list(u.meta["val"].shape) if isinstance(u.meta.get("val"), torch.Tensor) else None
        if shape is None:
            break
        nz = [d for d in shape if d != 1]
        if b in views and k is None and nz == [d for d in S if d != 1] and shape[-1] == S[-1]:
            chain.append(u)
            x = u
            continue
        if b in views and k is not None and [d for d in shape if d != 1] == [S[0], S[1] // k]:
            chain.append(u)
            x = u
            if shape == [S[0], S[1] // k]:
                break
            continue
        break
    if k is None or list(x.meta["val"].shape) != [S[0], S[1] // k]:
        return None
    return k, chain, x, [S[0], S[1] // k], kind


def _scan_kind(gm, example: list):
    """A Model that is one scan along the last dimension of its f32 input x: cumsum or cumprod of x, of
    flip(x) flipped back (reversed), of x * mask (masked, a bool mask of x's shape as the second input),
    or of x[..., :-1] after a column of the identity (exclusive: cat(zeros, cumsum(narrow(x)))). The
    row-wise scan template, told which (op_params op, reverse, exclusive, masked)."""
    if not example or example[0].dtype != torch.float32 or example[0].dim() < 1 or len(example) > 2:
        return None
    x = example[0]
    nd, n = x.dim(), x.shape[-1]
    ph = [p for p in gm.graph.nodes if p.op == "placeholder"]
    core = [c for c in gm.graph.nodes if c.op == "call_function" and _base(c) not in _COPIES]
    scans = [c for c in core if _base(c) in ("cumsum", "cumprod")]
    if len(scans) != 1 or scans[0].args[1] % nd != nd - 1 or scans[0].kwargs.get("dtype") not in (None, torch.float32):
        return None
    node = scans[0]
    op = 1 if _base(node) == "cumprod" else 0
    src = node.args[0]
    outs = [o for o in gm.graph.nodes if o.op == "output"][0].args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if len(outs) != 1:
        return None
    out, p = outs[0], {"op": op, "reverse": 0, "exclusive": 0, "masked": 0}
    last = lambda d: isinstance(d, int) and d % nd == nd - 1  # noqa: E731
    if len(example) == 2:  # x * mask
        m = example[1]
        if m.dtype != torch.bool or list(m.shape) != list(x.shape) or _base(src) != "mul" or \
                {a for a in src.args} != {ph[0], ph[1]} or out is not node or len(core) != 2:
            return None
        p["masked"] = 1
    elif src is ph[0]:
        if out is not node or len(core) != 1:
            return None
    elif _base(src) == "flip" and src.args[0] is ph[0] and [d % nd for d in src.args[1]] == [nd - 1]:
        if _base(out) != "flip" or out.args[0] is not node or [d % nd for d in out.args[1]] != [nd - 1] or len(core) != 3:
            return None
        p["reverse"] = 1
    elif _base(src) == "slice" and src.args[0] is ph[0] and last(src.args[1]) and list(src.args[2:]) in ([0, n - 1], [0, n - 1, 1]):
        # cat([the identity, [..., 1], the scan], dim=-1); the identity made of a slice or select of x
        if _base(out) != "cat" or not last(out.args[1] if len(out.args) > 1 else 0) or len(out.args[0]) != 2 or out.args[0][1] is not node:
            return None
        first = out.args[0][0]
        if _base(first) not in ("full_like", "full", "zeros_like", "ones_like", "zeros", "ones") or \
                list(first.meta["val"].shape) != list(x.shape[:-1]) + [1]:
            return None
        fill = {"zeros_like": 0, "zeros": 0, "ones_like": 1, "ones": 1}.get(_base(first))
        fill = first.args[1] if fill is None else fill
        if fill != op:  # the identity: 0 for a sum, 1 for a product
            return None
        shape_only = {c for c in core if c not in (src, node, out, first)}
        if any(_base(c) not in ("select", "unsqueeze", "slice", "view") for c in shape_only):
            return None
        p["exclusive"] = 1
    else:
        return None
    inputs = [{"name": "in0", "cls": "E", "integer": False, "i32": False}]
    if p["masked"]:
        inputs.append({"name": "in1", "cls": "E", "integer": True, "i32": False})
    return {"supported": True, "kind": "scan", "formula": "", "outputs": ["out0"], "shape": list(x.shape), "inputs": inputs,
            "op_params": p}


def _dim_rms_kind(gm, example: list):
    """A Model that is an RMS normalisation of its one f32 input over one dimension other than the last:
    x / sqrt(mean(x ** 2, dim, keepdim=True) + eps), or x * rsqrt(...) (KernelBench's level1/36 over the
    channels of [B, C, H, W]): the dim_reduce template's op 6, which reads each column twice."""
    if len(example) != 1 or example[0].dtype != torch.float32 or example[0].dim() < 2:
        return None
    core = [n for n in gm.graph.nodes if n.op == "call_function" and _base(n) not in _COPIES]
    if len(core) != 5:
        return None
    x = [n for n in gm.graph.nodes if n.op == "placeholder"][0]
    sq, mean, add, root, out = core
    nd = example[0].dim()
    if not ((_base(sq) == "pow" and sq.args == (x, 2)) or (_base(sq) == "mul" and sq.args == (x, x))):
        return None
    if _base(mean) != "mean" or mean.args[0] is not sq or len(mean.args) < 3 or not mean.args[2] or len(mean.args[1]) != 1:
        return None
    d = mean.args[1][0] % nd
    if math.prod(example[0].shape[d + 1:]) <= 1:
        return None
    if _base(add) != "add" or add.args[0] is not mean or not isinstance(add.args[1], (int, float)):
        return None
    ok = (_base(root) == "sqrt" and _base(out) == "div" and out.args == (x, root)) or \
        (_base(root) == "rsqrt" and _base(out) == "mul" and set(out.args) == {x, root})
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if not ok or root.args[0] is not add or outs != [out]:
        return None
    return {"supported": True, "kind": "dim_reduce", "formula": "", "outputs": ["out0"], "shape": list(example[0].shape),
            "inputs": [{"name": "in0", "cls": "E", "integer": False, "i32": False}],
            "op_params": {"op": 6, "dim": d, "keepdim": 1, "eps": float(add.args[1])}}


_DIM_REDUCE = {"sum": 0, "mean": 1, "max": 2, "amax": 2, "min": 3, "amin": 3, "argmax": 4, "argmin": 5}


def _dim_reduce_kind(gm, example: list):
    """A Model that is one reduction of its one f32 input over one dimension other than the last (a
    sum, mean, max, min, argmax or argmin with `dim`, keepdim or not; torch.max's indices unused): a
    dedicated template that reads the tensor in its own layout as [outer, r, c]. The reduction, the
    dimension and keepdim come with it (op_params op, dim, keepdim)."""
    if len(example) != 1 or example[0].dtype != torch.float32 or example[0].dim() < 2:
        return None
    core = [n for n in gm.graph.nodes if n.op == "call_function" and _base(n) not in _COPIES and n.target is not operator.getitem]
    if len(core) != 1 or _base(core[0]) not in _DIM_REDUCE:
        return None
    node, base, nd = core[0], _base(core[0]), example[0].dim()
    a = list(node.args) + [None] * 3
    dims = a[1] if a[1] is not None else node.kwargs.get("dim")
    keep = a[2] if a[2] is not None else node.kwargs.get("keepdim", False)
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if len(dims) != 1 or node.kwargs.get("dtype") not in (None, torch.float32):
        return None
    d = dims[0] % nd
    if math.prod(example[0].shape[d + 1:]) <= 1:
        return None  # over the last dimension: the row programs' reduction
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if base in ("max", "min"):  # (values, indices): the values the Model's one output, the indices unused
        if len(outs) != 1 or outs[0].target is not operator.getitem or outs[0].args != (node, 0):
            return None
    elif len(outs) != 1 or outs[0] is not node:
        return None
    return {"supported": True, "kind": "dim_reduce", "formula": "", "outputs": ["out0"], "shape": list(example[0].shape),
            "inputs": [{"name": "in0", "cls": "E", "integer": False, "i32": False}],
            "op_params": {"op": _DIM_REDUCE[base], "dim": d, "keepdim": int(bool(keep))}}


_POOL_OPS = {"avg_pool2d": False, "avg_pool3d": False, "max_pool2d_with_indices": True, "max_pool3d_with_indices": True,
             "max_pool2d": True, "max_pool3d": True}


def _pool_kind(gm, example: list):
    """A Model that is one max or average pooling of its one f32 input over its last 1, 2 or 3 dimensions
    (nn.MaxPool1d/2d/3d, nn.AvgPool1d/2d/3d; a 1-D pooling as torch runs it, a 2-D one over the input
    unsqueezed at -2 and squeezed back; a max pooling's indices unused): a dedicated template, with the
    window, stride, padding, dilation, ceil mode, count_include_pad and divisor as its numbers."""
    if len(example) != 1 or example[0].dtype != torch.float32 or example[0].dim() < 2:
        return None
    core = [n for n in gm.graph.nodes if n.op == "call_function" and _base(n) not in _COPIES]
    pools = [n for n in core if _base(n) in _POOL_OPS]
    if len(pools) != 1:
        return None
    node, base = pools[0], _base(pools[0])
    is_max, sd = _POOL_OPS[base], 3 if "3d" in base else 2
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"][0]
    src, lifted = node.args[0], False
    if src is not ph:  # a 1-D pooling: x.unsqueeze(-2)
        if _base(src) != "unsqueeze" or src.args[0] is not ph or src.args[1] % src.meta["val"].dim() != src.meta["val"].dim() - 2 or sd != 2:
            return None
        lifted = True
    a = list(node.args) + [None] * 7
    if is_max:
        names = ["self", "kernel_size", "stride", "padding", "dilation", "ceil_mode"]
        v = {"stride": [], "padding": 0, "dilation": 1, "ceil_mode": False}
    else:
        names = ["self", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"]
        v = {"stride": [], "padding": 0, "ceil_mode": False, "count_include_pad": True, "divisor_override": None}
    v.update({k: x for k, x in zip(names, a) if x is not None})
    v.update(node.kwargs)

    def spread(x):
        x = [x] if isinstance(x, int) else list(x)
        return [int(e) for e in (x * sd if len(x) == 1 else x)]

    k = spread(v["kernel_size"])
    st = spread(v["stride"]) if v["stride"] else list(k)
    pad, dil = spread(v["padding"]), spread(v.get("dilation", 1))
    if len(k) != sd or len(st) != sd or len(pad) != sd or len(dil) != sd:
        return None
    if lifted:
        if (k[0], st[0], pad[0], dil[0]) != (1, 1, 0, 1):
            return None
        k, st, pad, dil = k[1:], st[1:], pad[1:], dil[1:]
    nd = len(k)
    fill = 3 - nd
    k, st, pad, dil = [1] * fill + k, [1] * fill + st, [0] * fill + pad, [1] * fill + dil
    # what else the graph holds: the values read on (squeezed back after a 1-D pooling), the indices unused
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if len(outs) != 1:
        return None
    vals = node
    if is_max and base.endswith("with_indices"):
        getters = [u for u in node.users if u.target is operator.getitem]
        vals = next((u for u in getters if u.args[1] == 0), None)
        if vals is None or len(getters) != len(node.users) or not all(_unused(u) for u in getters if u.args[1] == 1):
            return None
    want = vals
    if lifted:
        sq = [u for u in vals.users if _base(u) == "squeeze"]
        if len(sq) != 1 or len(vals.users) != 1:
            return None
        want = sq[0]
    if outs[0] is not want:
        return None
    params = {"nd": nd, "max": int(is_max), "ceil_mode": int(bool(v["ceil_mode"])),
              "count_include_pad": int(bool(v.get("count_include_pad", True))), "divisor": int(v.get("divisor_override") or 0)}
    for i, axis in enumerate("dhw"):
        params.update({f"k{axis}": k[i], f"s{axis}": st[i], f"p{axis}": pad[i], f"d{axis}": dil[i]})
    return {"supported": True, "kind": "pool", "formula": "", "op_params": params,
            "inputs": [{"name": "in0", "cls": "E", "integer": False, "i32": False}], "outputs": ["out0"],
            "shape": list(example[0].shape)}


def _group_norm_kind(gm, example: list):
    """A Model that is one group norm (aten.native_group_norm) of its input with an affine weight and
    bias, which go to a dedicated template: its group count and eps come with it."""
    ops = [n for n in gm.graph.nodes if n.op == "call_function" and _base(n) not in _COPIES]
    gn = [n for n in ops if _base(n) == "native_group_norm"]
    if len(gn) != 1 or any(n is not gn[0] and n.target is not operator.getitem for n in ops):
        return None
    node = gn[0]
    x, w, b = node.args[:3]
    groups, eps = node.args[6], node.args[7]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not (x is placeholders[0] and w is not None and b is not None and w.op == "placeholder" and b.op == "placeholder"):
        return None
    if [placeholders.index(w), placeholders.index(b)] != [1, 2] or len(placeholders) != 3:
        return None
    if any(e.dtype != torch.float32 for e in example) or example[0].dim() < 3:
        return None
    outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if len(outs) != 1 or outs[0].target is not operator.getitem or outs[0].args != (node, 0):
        return None
    return {"supported": True, "kind": "group_norm", "formula": "", "outputs": ["out0"], "shape": list(example[0].shape),
            "inputs": [{"name": f"in{i}", "cls": "E" if i == 0 else "C", "integer": False, "i32": False} for i in range(3)],
            "op_params": {"groups": int(groups), "eps": float(eps)}}


def _instance_norm_kind(gm, example: list):
    """A Model that is one instance norm without affine weights (nn.InstanceNorm*d's default: torch views
    x [N, C, ...] as [1, N * C, ...] and batch-normalises that in training mode): a group norm with one
    group a channel (op_params groups 0: as many as the channels, whatever the shape) and no weight, to
    the group-norm template, which keeps a long group in a cluster's registers and reads it once."""
    ops = [n for n in gm.graph.nodes if n.op == "call_function" and _base(n) not in _COPIES]
    bn = [n for n in ops if _base(n) in ("native_batch_norm", "_native_batch_norm_legit")]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(bn) != 1 or len(placeholders) != 1 or example[0].dtype != torch.float32 or example[0].dim() < 3:
        return None
    node = bn[0]
    # (input, weight, bias, running_mean, running_var, training, momentum, eps), both overloads
    weight, bias, rmean, rvar, training, _, eps = node.args[1:8] if len(node.args) >= 8 else (None,) * 7
    if not training or any(a is not None for a in (weight, bias, rmean, rvar)):
        return None
    shape = list(example[0].shape)
    n, c = shape[0], shape[1]
    view = node.args[0]
    if not (view.op == "call_function" and _base(view) in ("view", "_unsafe_view", "reshape") and view.args[0] is placeholders[0]):
        return None
    if [int(d) for d in view.args[1]] != [1, n * c] + shape[2:]:
        return None
    # every other op: the getitems of the norm and the view back to x's shape
    rest = [m for m in ops if m is not node and m is not view]
    if any(m.target is not operator.getitem and _base(m) not in ("view", "_unsafe_view", "reshape", "empty") for m in rest):
        return None
    outs = [m for m in gm.graph.nodes if m.op == "output"][0].args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if len(outs) != 1:
        return None
    out = outs[0]
    while out.op == "call_function" and _base(out) in {"view", "_unsafe_view", "reshape"} | _COPIES:
        out = out.args[0]
    val = outs[0].meta.get("val")
    if not (out.target is operator.getitem and out.args == (node, 0)) or val is None or list(val.shape) != shape:
        return None
    return {"supported": True, "kind": "group_norm", "formula": "", "outputs": ["out0"], "shape": shape,
            "inputs": [{"name": "in0", "cls": "E", "integer": False, "i32": False}],
            "op_params": {"groups": 0, "eps": float(eps), "affine": 0}}


def as_traced_input(x):
    """A Python int or float input as the 0-dim tensor a native candidate gets for it (int64 or float32);
    anything else as it is."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return torch.tensor(x, dtype=torch.float32 if isinstance(x, float) else torch.int64)
    return x


def _trace_at(t: taskmod.KbTask, shape: dict) -> dict:
    """The Model traced at `shape` on fake tensors: shapes and dtypes only, so a problem of 17 GB traces
    in no memory at all."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    try:
        with FakeTensorMode():
            return _trace_fake(t, shape)
    except taskmod.TaskError:
        raise
    except Exception as e:  # noqa: BLE001 - making the Model or its inputs failed on fake tensors
        return {"supported": False, "reason": f"tracing failed: {type(e).__name__}: {e}"}


def _trace_fake(t: taskmod.KbTask, shape: dict) -> dict:
    from torch.fx.experimental.proxy_tensor import make_fx
    model = t.model(shape, None, torch.float32)
    for mod in model.modules():
        if isinstance(mod, torch.nn.RNNBase):  # unrolled over every step, its trace alone takes minutes
            return {"supported": False, "reason": f"a recurrent layer (nn.{type(mod).__name__}): no template takes one"}
    xs = t.inputs(shape, 1234, "cpu", torch.float32)
    params = taskmod.params_and_buffers(model)
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    nx = len(xs)

    def f(*args):
        return torch.func.functional_call(model, dict(zip(names, args[nx:])), tuple(args[:nx]))

    # a Python number among the inputs (level1/5's A * s) reaches a native candidate as a 0-dim tensor
    # (candidate.as_abi_input): traced as one, a scalar of the program
    xs = [as_traced_input(x) for x in xs]
    example = list(xs) + params
    if not all(isinstance(a, torch.Tensor) for a in example):
        bad = next(type(a).__name__ for a in example if not isinstance(a, torch.Tensor))
        return {"supported": False, "reason": f"an input is not a tensor or a number (a {bad})"}
    try:
        # the inputs and weights are fake already (the caller's FakeTensorMode): traced as they are
        gm = make_fx(f, decomposition_table=_decompositions(), tracing_mode="real")(*example)
    except Exception as e:  # noqa: BLE001 - a model make_fx cannot trace is simply not fusible here
        return {"supported": False, "reason": f"tracing failed: {type(e).__name__}: {e}"}
    kind = (_single_op_kind(gm, example) or _scan_kind(gm, example) or _dim_reduce_kind(gm, example)
            or _dim_rms_kind(gm, example) or _group_norm_kind(gm, example) or _instance_norm_kind(gm, example)
            or _pool_kind(gm, example))
    if kind is not None:
        if kind.get("op_params"):
            kind["init"] = t.init_scalars(shape)
        return kind
    _matrix_vector_as_rows(gm)
    one = _trace_graph(gm, example, nx)
    one.pop("_node", None)
    if one.get("supported"):
        return one
    staged = _trace_staged(gm, example, nx)
    if staged is None:
        return one
    if not staged.get("supported"):
        return {"supported": False, "reason": f"{one['reason']}; as a plan of several programs: {staged['reason']}"}
    return staged


def _trace_graph(gm, example: list, nx: int, S: list | None = None, frame: list | None = None) -> dict:
    """One program of `gm` (a GEMM and its epilogue, or a row program): the formula, its inputs' classes and
    the tensors they bind, or why not. S and frame (a stage of a plan, tuner/plan): the main shape to use,
    and the shape it is a squeezed view of (inputs then classed by how they broadcast to it)."""
    try:
        gemm = _find_gemm(gm)
        gshape = list(gemm[0].meta["val"].shape) if gemm else None
        while gshape is not None and len(gshape) > 2 and gshape[0] == 1 and not gemm[6]:
            gshape = gshape[1:]  # a bmm of one batch: the product is [M, N]
        # the product's columns pooled in windows (an AvgPool1d after a Linear: the GEMM makes the pooled
        # product from B's and the bias's columns averaged first; a MaxPool1d: a pass after the GEMM takes the maxima)
        pooled = _pooled_product(gemm[0]) if gemm and not gemm[6] else None
        if pooled:
            gshape = pooled[3]
        m = _Matcher(gm, example, nx, gshape if gemm else S, frame, gemm=bool(gemm))
        inputs = []
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        skip = set()  # nodes the GEMM consumes
        if gemm:
            node = gemm[0]
            skip = {node}
            for x in node.args:  # the operands' views back to the inputs (the GEMM reads their memory as it is)
                while isinstance(x, torch.fx.Node) and x.op == "call_function":
                    skip.add(x)
                    if _base(x) not in _LAYOUT_VIEWS:
                        break
                    x = x.args[0]
            if pooled:
                skip |= set(pooled[1])
        # Nodes whose result nothing uses: dead code, or an in-place update of a buffer that no output
        # shows (a BatchNorm's num_batches_tracked += 1 in training).
        dead = {n for n in gm.graph.nodes if n.op == "call_function" and not n.users}
        for i, (node, ex) in enumerate(zip(placeholders, example)):
            if gemm and node in (gemm[1], gemm[2]) and not set(node.users) - skip:
                continue  # an operand only: not an epilogue input
            if gemm and not set(node.users) - dead:
                continue  # unused, or read only by dead code (kfab_run still gets it: the GEMM binds tensors by index)
            integer = not ex.is_floating_point()
            if ex.is_floating_point() and ex.dtype != torch.float32:
                raise Unsupported(f"input {i} is {ex.dtype}")
            if integer and ex.dtype not in (torch.int64, torch.int32):
                raise Unsupported(f"input {i} is {ex.dtype}")
            c = m.shape_cls(ex.shape, integer)
            pool_in = 1
            if pooled and gemm[4] is node and list(ex.shape) == [pooled[3][1] * pooled[0]] and not set(node.users) - {gemm[0]}:
                c, pool_in = "C", pooled[0]  # the Linear's bias: averaged like the product's columns, or added before the max
            if c is None and node.users:
                # an input read only through reshapes of one class (a matrix-vector product's [K, 1] column, read
                # as a row of [1, K]): the same elements in the same order, so that class
                cs = {m.shape_cls(u.meta["val"].shape, integer) if u.op == "call_function" and _base(u) in _RESHAPES else None
                      for u in node.users}
                c = cs.pop() if len(cs) == 1 else None
            if c is None:
                raise Unsupported(f"input {i} has shape {list(ex.shape)}, which is not the row shape {m.S}, a row, a column or a scalar",
                                  next((u for u in gm.graph.nodes if u in node.users), None))
            if integer and c != "R":
                raise Unsupported(f"integer input {i} is not one index per row")
            if m.groups > 1 and c == "R":
                raise Unsupported(f"input {i} is per product row, beside a GroupNorm whose rows are groups")
            nm = f"in{i}"
            m.val[node], m.cls[node] = nm, c
            inputs.append({"name": nm, "cls": c, "integer": integer, "i32": ex.dtype == torch.int32, "tensor": i})
            if pool_in > 1:
                inputs[-1]["pool"] = pool_in
            if m.groups > 1 and c == "C":
                inputs[-1]["per_channel"] = True
        if gemm:
            inputs.append({"name": "acc", "cls": "E", "integer": False, "i32": False, "tensor": -1})
        outputs = []
        for node in gm.graph.nodes:
            if node.op in ("placeholder",) or node in skip - ({gemm[0]} if gemm else set()):
                continue
            if gemm and node is gemm[0]:
                at = pooled[2] if pooled else node  # a pooled product's value is the pooling's
                if gemm[4] is None or (pooled and pooled[4] == "max"):  # a max pooling adds the bias before its maximum
                    m.val[at], m.cls[at] = "acc", "E"
                else:
                    be, bc = m.arg(gemm[4])
                    m.emit(at, f"(acc + {be})", m.join("E", bc))
                continue
            if node.op == "output":
                outs = node.args[0]
                outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
                for j, o in enumerate(outs):
                    if not isinstance(o, torch.fx.Node):
                        raise Unsupported("an output is not a tensor")
                    v = o.meta.get("val")
                    if not isinstance(v, torch.Tensor) or v.dtype != torch.float32:
                        raise Unsupported("an output is not f32")
                    want = m.shape_cls(v.shape)
                    if want != m.cls[o] and not (want == "K" and m.cls[o] == "K"):
                        raise Unsupported(f"output {j} has shape {list(v.shape)} but is a {m.cls[o]}-class value", o)
                    m.lines.append(f"out{j} = {m.val[o]}")
                    outputs.append(f"out{j}")
                continue
            if node.op != "call_function":
                raise Unsupported(f"graph node {node.op} {node.target}")
            if node in dead:
                continue
            try:
                m.visit(node)
            except Unsupported as e:
                e.node = e.node or node
                raise
            m.after_all_check(node)
        for node, c in m.reclassed.items():
            for inp in inputs:
                if inp["name"] == m.val[node]:
                    inp["cls"] = c
    except Unsupported as e:
        return {"supported": False, "reason": str(e), "_node": e.node}
    r = {"supported": True, "formula": "\n".join(m.lines), "inputs": inputs, "outputs": outputs, "shape": m.flat_shape()}
    if m.k > 1:
        r["row_dims"] = m.k
    if m.groups > 1:
        r["groups"] = m.groups
    if gemm:
        r["gemm"] = {"a": placeholders.index(gemm[1]), "b": placeholders.index(gemm[2]), "trans_b": gemm[3]}
        if gemm[5]:
            r["gemm"]["trans_a"] = True  # A given as [K, M]
        if gemm[6]:
            r["gemm"]["batched"] = True  # A [batch, M, K], B [batch, K, N]: a GEMM a batch
        if pooled:
            r["gemm"]["pool"] = pooled[0]  # the product's columns averaged (or max-pooled) in windows of pool
            if pooled[4] == "max":
                r["gemm"]["pool_max"] = True
        # the product's dimensions at this shape (a batched one's per batch): the tuner orders its points by them
        left = gemm[0].args[1] if _base(gemm[0]) == "addmm" else gemm[0].args[0]
        out = list(gemm[0].meta["val"].shape)
        if gemm[6]:
            r["gemm"]["batch"] = int(out[0])
        r["gemm"].update({"m": int(out[-2]), "n": int(out[-1]) // (pooled[0] if pooled and pooled[4] == "avg" else 1), "k": int(left.meta["val"].shape[-1])})
        r["tensors"] = len(placeholders)
    return r


_MAX_STAGES = 4


def _free(n) -> bool:
    """A node every stage that reads it makes for itself: a view of the Model's inputs (a Linear's
    transposed weight) or a constant (no tensor arguments)."""
    if n.op != "call_function":
        return False
    ins = n.all_input_nodes
    if not ins:
        return True
    return _base(n) in _LAYOUT_VIEWS and all(a.op == "placeholder" or _free(a) for a in ins)


def _stage_module(ops: list, later: set, model_outs: list):
    """The graph of one stage: its ops (in order), the free nodes they read, a placeholder for every
    other value they read (a Model input or an earlier stage's result), and as outputs the values that
    later stages or the Model's outputs read. (module, externals, results)."""
    inside = set(ops)
    externals: list = []
    free: list = []

    def collect(n):
        for a in n.all_input_nodes:
            if a in inside or a in externals or a in free:
                continue
            if _free(a):
                collect(a)
                free.append(a)
            else:
                externals.append(a)
    for n in ops:
        collect(n)
    results = [n for n in ops if any(u in later or u.op == "output" for u in n.users)]
    for n in results:
        if n in model_outs and any(u in later for u in n.users):
            raise Unsupported(f"{n.name} is an output of the Model and read by a later stage")
    g = torch.fx.Graph()
    env: dict = {}
    for k, a in enumerate(externals):
        p = g.placeholder(f"s{k}")
        p.meta["val"] = a.meta["val"]
        env[a] = p
    copied = set(free) | inside
    for n in ops[0].graph.nodes:  # in the graph's order, which is topological
        if n in copied:
            env[n] = g.node_copy(n, lambda a: env[a])
    g.output(tuple(env[n] for n in results))
    return torch.fx.GraphModule(torch.nn.Module(), g), externals, results


def _trace_stage(sm, ex: list, results: list, gemm: bool) -> dict:
    """A stage as one program: at its inputs' main shape, or (a stage without a GEMM) at its largest
    result's shape with the dimensions of size 1 left out (a broadcast into a shape of its own)."""
    r = _trace_graph(sm, ex, len(ex))
    if r.get("supported") or gemm:
        return r
    big = max(results, key=lambda n: n.meta["val"].numel())
    frame = list(big.meta["val"].shape)
    S = [d for d in frame if d != 1] or [1]
    f = _trace_graph(sm, ex, len(ex), S, frame)
    if f.get("supported"):
        f["view"] = S
        return f
    return r


def _trace_staged(gm, example: list, nx: int) -> dict | None:
    """The Model as a plan of several programs (src/tuner/plan), where one program cannot take it: a
    stage for each matrix product (level2_45: a Linear, a sigmoid, a second Linear and a logsumexp), and
    a cut before the node where a stage did not fit (level2_75: a GroupNorm's rows, then a minimum over
    the whole row, then a bias that broadcasts the [M, 1] minima to [1, N, M, 1]). Each stage's results
    that later stages read are buffers (`tmps`); a stage binds Model tensors and buffers by index (the
    Model's inputs first, then the buffers). None where there is nothing to cut."""
    ops = [n for n in gm.graph.nodes if n.op == "call_function" and not _free(n)]
    if len(ops) < 2:
        return None
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    model_outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    prods = [i for i, n in enumerate(ops) if _base(n) in _PRODUCTS]
    cuts = set(prods[1:])
    reason = "nothing to cut"
    for _ in range(2 * _MAX_STAGES):
        bounds = sorted(cuts | {0}) + [len(ops)]
        if len(bounds) - 1 > _MAX_STAGES:
            return {"supported": False, "reason": f"more than {_MAX_STAGES} programs ({reason})"}
        stages, tmps, where = [], [], {}  # where: node -> combined tensor index
        for k, p in enumerate(placeholders):
            where[p] = k
        retry = False
        for si in range(len(bounds) - 1):
            part = ops[bounds[si]:bounds[si + 1]]
            later = set(ops[bounds[si + 1]:])
            try:
                sm, externals, results = _stage_module(part, later, model_outs)
            except Unsupported as e:
                return {"supported": False, "reason": str(e)}
            if not results:
                return {"supported": False, "reason": f"stage {si + 1} computes nothing a later stage or output reads"}
            ex = [a.meta["val"] for a in externals]
            r = _trace_stage(sm, ex, results, any(_base(n) in _PRODUCTS for n in part))
            if not r.get("supported"):
                bad = r.pop("_node", None)
                reason = f"stage {si + 1} ({part[0].name} .. {part[-1].name}): {r['reason']}"
                src = next((n for n in part if n.name == getattr(bad, "name", None)), None)
                at = part.index(src) if src is not None else 0
                if at > 0:
                    cuts.add(bounds[si] + at)
                    retry = True
                    break
                return None if len(bounds) == 2 else {"supported": False, "reason": reason}
            r.pop("_node", None)
            r["bind"] = [where[a] for a in externals]
            r["results"] = []
            for n in results:
                if n in model_outs:
                    r["results"].append({"output": model_outs.index(n)})
                else:
                    v = n.meta["val"]
                    if not isinstance(v, torch.Tensor) or v.dtype != torch.float32:
                        return {"supported": False, "reason": f"{n.name}, read by a later stage, is not an f32 tensor"}
                    where[n] = len(placeholders) + len(tmps)
                    r["results"].append({"tmp": len(tmps)})
                    tmps.append({"shape": [int(d) for d in v.shape], "node": n.name})
            stages.append(r)
        if retry:
            continue
        return {"supported": True, "stages": stages, "tmps": tmps, "tensors": len(placeholders),
                "input_shapes": [[int(d) for d in p.meta["val"].shape] for p in placeholders],
                "formula": "\n".join(f"# program {k + 1} of {len(stages)}\n{st['formula']}" for k, st in enumerate(stages)),
                "shape": stages[-1]["shape"]}
    return {"supported": False, "reason": reason}


_NUM = re.compile(r"(?<![A-Za-z_0-9.])(\d+\.?\d*(?:e[-+]?\d+)?)")


def _generalize(a: dict, b: dict) -> dict:
    """The formula of shape a with every constant that differs at shape b and is the row count, the
    row length or their product there replaced by nrows, ncols or nrows * ncols."""
    for key in ("groups", "row_dims"):
        if a.get(key, 1) != b.get(key, 1):
            return {"supported": False, "reason": f"the program's {key} changes with the shape ({a.get(key, 1)}, then {b.get(key, 1)})"}
    ta, tb = _NUM.split(a["formula"]), _NUM.split(b["formula"])
    if len(ta) != len(tb) or any(x != y for x, y in zip(ta[0::2], tb[0::2])):
        return {"supported": False, "reason": "the traced graph changes with the shape"}
    def dims(r):
        n = r["shape"][-1]
        return n, math.prod(r["shape"][:-1])
    na, ra = dims(a)
    nb, rb = dims(b)
    out = list(ta)
    for k in range(1, len(ta), 2):
        x, y = float(ta[k]), float(tb[k])
        if x == y:
            continue
        for sym, va, vb in (("ncols", na, nb), ("nrows", ra, rb), ("(nrows * ncols)", ra * na, rb * nb)):
            if x == va and y == vb:
                out[k] = sym
                break
        else:
            return {"supported": False, "reason": f"the constant {ta[k]} changes with the shape ({tb[k]} at another one)"}
    r = dict(a)
    r["formula"] = "".join(out)
    return r


def _dim_ref(va: int, vb, ins_a: list, ins_b) -> list:
    """A buffer's or a view's dimension (va at the traced shape, vb at the second one, None where there is
    none) as [constant, [[tensor, dim], ...]]: the product of the Model's tensors' dimensions that equals it
    at both shapes, times the constant, so that kfab_run sizes it from the shapes it is given."""
    dims = [(i, d, x, None if ins_b is None else ins_b[i][d]) for i, sh in enumerate(ins_a) for d, x in enumerate(sh)]
    if va == 1 and vb in (None, 1):
        return [1, []]
    for i, d, x, y in dims:
        if x == va and (vb is None or y == vb):
            return [1, [[i, d]]]
    for i, d, x, y in dims:
        for j, e, x2, y2 in dims:
            if (i, d) < (j, e) and x * x2 == va and (vb is None or y * y2 == vb):
                return [1, [[i, d], [j, e]]]
    if vb is None or va == vb:
        return [va, []]
    raise Unsupported(f"a buffer's dimension of {va} (and {vb} at another shape) that no input's dimensions give")


def _plan_dims(a: dict, b: dict | None) -> dict:
    """The plan's buffers and views sized by the Model's tensors' dimensions (_dim_ref); its stages'
    formulas generalized against the second shape's (constants that are the row count or length)."""
    if b is not None:
        if len(b.get("stages", [])) != len(a["stages"]) or len(b["tmps"]) != len(a["tmps"]):
            return {"supported": False, "reason": "the plan of programs changes with the shape"}
        for k, (sa, sb) in enumerate(zip(a["stages"], b["stages"])):
            g = _generalize(sa, sb)
            if not g.get("supported"):
                return {"supported": False, "reason": f"program {k + 1}: {g['reason']}"}
            a["stages"][k] = g
    ins_a, ins_b = a["input_shapes"], (b["input_shapes"] if b is not None else None)
    try:
        for t, tmp in enumerate(a["tmps"]):
            sb = b["tmps"][t]["shape"] if b is not None else [None] * len(tmp["shape"])
            if len(sb) != len(tmp["shape"]):
                return {"supported": False, "reason": "a buffer's rank changes with the shape"}
            tmp["dims"] = [_dim_ref(x, y, ins_a, ins_b) for x, y in zip(tmp["shape"], sb)]
        for k, st in enumerate(a["stages"]):
            st["n"] = st["shape"][-1]
            if "view" in st:
                vb = b["stages"][k].get("view") if b is not None else [None] * len(st["view"])
                if vb is None or len(vb) != len(st["view"]):
                    return {"supported": False, "reason": f"program {k + 1}'s view changes with the shape"}
                st["view_dims"] = [_dim_ref(x, y, ins_a, ins_b) for x, y in zip(st["view"], vb)]
    except Unsupported as e:
        return {"supported": False, "reason": str(e)}
    a["formula"] = "\n".join(f"# program {k + 1} of {len(a['stages'])}\n{st['formula']}" for k, st in enumerate(a["stages"]))
    return a


def _bind_params(a: dict, b: dict) -> dict:
    """A dedicated template's numbers (a group count, an eps) that change with the shape are the
    Model's constructor arguments: each becomes `NAME_init`, the index of the init input that equals
    it at both traced shapes (kfab_init passes them to the kernel); one found nowhere is refused."""
    params = dict(a["op_params"])
    for k, va in a["op_params"].items():
        vb = b["op_params"][k]
        if va == vb:
            continue
        hits = [i for i, (x, y) in enumerate(zip(a["init"], b["init"])) if x == va and y == vb]
        if not hits:
            return {"supported": False, "reason": f"the {a['kind']}'s {k} changes with the shape ({va}, then {vb}) and is none of the "
                                                  f"Model's constructor arguments, so no kernel can know it"}
        params[k + "_init"] = hits[0]
    r = dict(a)
    r["op_params"] = params
    r.pop("init", None)
    return r


def trace(t: taskmod.KbTask, overrides: dict) -> dict:
    """{"supported", "reason"?, "formula", "inputs": [{name, cls, integer, i32}], "outputs": [...],
    "shape", "n": the row length at `overrides`}. The Model is traced at its own constants and at a
    second shape (the first held-out one, else the GPU one), so that constants which are really
    shape sizes (a batch mean's divisor) become nrows/ncols rather than numbers that only hold once."""
    a = _trace_at(t, {})
    if not a.get("supported"):
        return a
    other = t.heldout[0] if t.heldout else (t.gpu or None)
    if other and a.get("op_params"):
        b = _trace_at(t, other)
        if b.get("kind") != a["kind"]:
            return {"supported": False, "reason": f"the Model is a {a['kind']} at one shape but not at another"}
        a = _bind_params(a, b)
        if not a.get("supported"):
            return a
        if a["kind"] == "pool" and any(k.endswith("_init") for k in a["op_params"]):
            return {"supported": False, "reason": "the pooling window, stride, padding or dilation changes with the shape: "
                                                  "the pool template builds them into the kernel"}
        if a["kind"] in ("dim_reduce", "scan") and any(k.endswith("_init") for k in a["op_params"]):
            return {"supported": False, "reason": f"the {a['kind']}'s dimension or form changes with the shape: its template "
                                                  "builds them into the kernel"}
    if other and not a.get("kind"):
        b = _trace_at(t, other)
        if not b.get("supported"):
            return b
        a = _plan_dims(a, b) if "stages" in a else _generalize(a, b)
        if not a.get("supported"):
            return a
    elif "stages" in a:
        a = _plan_dims(a, None)
        if not a.get("supported"):
            return a
    # the row length at the requested shape, from meta tensors (no memory)
    n = a["shape"][-1]
    shape = list(a["shape"])
    if overrides:
        t.apply(overrides)
        try:
            with torch.device("meta"):
                big = [x for x in t.mod.get_inputs() if isinstance(x, torch.Tensor) and x.is_floating_point()]
        finally:
            t.apply({})
        if big:
            shape = list(max(big, key=lambda x: x.dim()).shape)
            n = math.prod(shape[-a.get("row_dims", 1):])
    a["n"] = n
    if a.get("kind") == "group_norm" and len(shape) >= 3 and isinstance(a["op_params"].get("groups"), int):
        # the values a group holds at the requested shape: the template's grid puts first the points that keep
        # a group that long on chip (a hint for the order of the search, never a constant of the kernel)
        groups = a["op_params"]["groups"] or shape[1]
        a["op_params"]["group_len"] = math.prod(shape[1:]) // max(groups, 1)
    if a.get("kind") == "pool" and shape:
        # the input's width at the requested shape: the pooling grid sizes its marching blocks' width by it (a
        # hint for the points it offers, never a number the kernel's correctness rests on)
        a["op_params"]["in_w"] = int(shape[-1])
    return a
