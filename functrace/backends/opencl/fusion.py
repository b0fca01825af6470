"""Partitioning the optimized IR into kernels, and OpenCL C code generation for them.

* Every maximal group of elementwise equations producing one output shape becomes one
  generated kernel.  Broadcast operands are read through index arithmetic (a
  ``broadcast_in_dim`` or ``reshape`` of a kernel input becomes an access pattern, not a copy).
* A reduction absorbs the elementwise group that produces its operand when nothing else
  needs that group's values (``sum(x * y, axis)`` is one kernel).
* Code is explicitly vectorized: each work-item handles 4, 8 or 16 consecutive elements (the
  device's preferred vector width, ``planner._vector_width``) with vector types (PoCL does
  not vectorize scalar kernels well); the last, partial vector runs the same vector code on
  masked lanes.  ``a*b+c`` is written as such (no ``fma()``).
* Bounds by construction: an input is read a vector at a time only where the whole vector
  lies in one contiguous run of the view it reads (``vector_readable``), else lane by lane;
  every kernel starts its vectors on vector boundaries of its rows to make that decidable.

Only numbers and fixed identifiers are spliced into generated source: no user string ever is.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ... import primitives as P
from ...core import Literal
from ...primitives import special
from ...transforms.optimize import shape_size

VEC = 8  # default lanes per work-item; the executable picks the device's preferred width

CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.int32): "int",
         np.dtype(np.int64): "long", np.dtype(bool): "uchar"}
CTYPE.update({np.dtype(np.uint32): "uint", np.dtype(np.uint64): "ulong"})  # random bits (ft.random)
# float16 buffers are ``half`` pointers, read and written only by OpenCL 1.x core's vload_half /
# vstore_half_rte (no cl_khr_fp16 needed): kernels compute their values in float and round each
# float16 result to float16 (``ft_round_half``), as the numpy backend does after every operation
CTYPE[np.dtype(np.float16)] = "half"
MASK_OF = {"float": "int", "double": "long", "int": "int", "long": "long", "uchar": "int"}  # bools: int lanes
MASK_OF.update({"uint": "int", "ulong": "long"})
_WIDE = ("double", "long", "ulong")  # 64-bit lanes: their comparisons give long masks

REDUCTIONS = {P.reduce_sum_p, P.reduce_prod_p, P.reduce_max_p, P.reduce_min_p}

# Builtins whose vector forms are wrong on some drivers: emitted lane by lane (scalar calls, which
# were right in every case).  PoCL 3.1 (Debian, LLVM 15) on AVX-512 CPUs, with a 0, inf or NaN in
# another lane of the vector: float tan (and sin, cos: we use native_sin/native_cos) 4x off for
# small |x| at 4-16 lanes; double pow (0.94 for 1.5e31) and fmod at 8 and 16 lanes, and double8
# fmod ran for minutes on quotients of 1e8 (found by the fuzzer; see tests/test_opencl_kernels.py)
_LANEWISE_TYPES = {P.tan_p: {"float"}, P.pow_p: {"double"}, P.rem_p: {"double"}}

# float32 exp, tanh, log and log1p (every vector width), each a Cody-Waite reduction and a Cephes
# polynomial with plain integer exponent handling: PoCL's builtins spend a third more multiply
# units on cases these handle with one select.  Measured on PoCL 3.1 (float16 lanes, 4M values):
# the chain tanh(x)*x + exp(-x*x) + sin(x)*0.5 - log1p(x*x) 7.8 -> 6.6 ms; see
# tests/test_opencl_kernels.py for the accuracy (at most 2 ulp, specials and subnormals included).
_F32_MATH = """
inline {t} ft_exp_reduced_{t}({t} z, {t}* t) {{  /* e^r for z = n ln2 + r; *t holds n in its low bits */
    *t = z * 1.44269504f + 12582912.0f;                          /* + 1.5 * 2^23 rounds z / ln2 */
    const {t} n = *t - 12582912.0f;
    const {t} r = (z - n * 0.693359375f) + n * 2.12194440e-4f;   /* ln2 = 0.693359375 - 2.12194440e-4 */
    {t} y = 1.9875691500E-4f * r + 1.3981999507E-3f;
    y = y * r + 8.3334519073E-3f; y = y * r + 4.1665795894E-2f; y = y * r + 1.6666665459E-1f;
    y = y * r + 5.0000001201E-1f;
    return y * (r * r) + r + 1.0f;
}}
inline {t} ft_exp_{t}({t} z) {{  /* 2^n in two factors: subnormal results and overflow to inf come out right */
    z = select(z, ({t})89.0f, z > 89.0f);                        /* selects, not fmin/fmax: NaN stays */
    z = select(z, ({t})-104.0f, z < -104.0f);
    {t} t;
    const {t} y = ft_exp_reduced_{t}(z, &t);
    const {it} n = as_{it}(t) - ({it})0x4B400000, n1 = n >> 1;
    return y * as_{t}((n1 + ({it})127) << 23) * as_{t}((n - n1 + ({it})127) << 23);
}}
inline {t} ft_tanh_{t}({t} x) {{  /* (1 - u) / (1 + u), u = e^-2|x|; an odd polynomial below 0.3, where that cancels */
    {t} z = -2.0f * fabs(x);
    z = select(z, ({t})-87.0f, z < -87.0f);                      /* tanh is +-1 there; 2^n stays normal */
    {t} t;
    const {t} u = ft_exp_reduced_{t}(z, &t) * as_{t}((as_{it}(t) - ({it})(0x4B400000 - 127)) << 23);
    const {t} x2 = x * x;
    const {t} small = x * (1.0f + x2 * (-0.33333333f + x2 * (0.13333333f + x2 * (-0.05396825f + x2 * 0.02186949f))));
    return select(copysign((1.0f - u) / (1.0f + u), x), small, fabs(x) < 0.3f);
}}
inline {t} ft_log_core_{t}({t} u, {t} k) {{  /* log(u * 2^k) for a normal positive u */
    const {it} bits = as_{it}(u);
    const {it} e = (bits - ({it})0x3f3504f3) >> 23;             /* u = m 2^e, m in [sqrt(1/2), sqrt(2)) */
    const {t} f = as_{t}(bits - (e << 23)) - 1.0f;
    const {t} z = f * f;
    {t} y = 7.0376836292E-2f * f - 1.1514610310E-1f;
    y = y * f + 1.1676998740E-1f; y = y * f - 1.2420140846E-1f; y = y * f + 1.4249322787E-1f;
    y = y * f - 1.6668057665E-1f; y = y * f + 2.0000714765E-1f; y = y * f - 2.4999993993E-1f;
    y = (y * f + 3.3333331174E-1f) * f * z;
    k = k + convert_{t}(e);
    return f + (y - 2.12194440e-4f * k - 0.5f * z) + 0.693359375f * k;
}}
inline {t} ft_log_fix_{t}({t} r, {t} u, {t} p) {{  /* u <= 0, +inf and NaN (p: the argument) */
    r = select(r, p, !(p < INFINITY));
    r = select(r, ({t})(-INFINITY), u == 0.0f);
    return select(r, ({t})NAN, u < 0.0f);
}}
inline {t} ft_log_{t}({t} u) {{
    const {it} sub = u < 1.17549435e-38f;                        /* subnormal: scale by 2^23 first */
    const {t} r = ft_log_core_{t}(select(u, u * 8388608.0f, sub), select(({t})0.0f, ({t})-23.0f, sub));
    return ft_log_fix_{t}(r, u, u);
}}
inline {t} ft_log1p_{t}({t} x) {{  /* log(1 + x) plus the rounding error of 1 + x (exactly x - (u - 1)) over u */
    const {t} u = 1.0f + x;
    return ft_log_fix_{t}(ft_log_core_{t}(u, ({t})0.0f) + (x - (u - 1.0f)) / u, u, x);
}}"""

_ROUND_HALF = """
inline {t} ft_round_half_{t}({t} x) {{  /* x rounded to float16 (nearest, ties to even), as a float */
    {ht} h;
    vstore_half{w}_rte(x, 0, (__private half*)&h);
    return vload_half{w}(0, (__private const half*)&h);
}}"""
_HELPER_USE = re.compile(r"\bft_\w+?_(float(?:2|4|8|16)?)\(")


def f32_helpers(source: str) -> str:
    """The helper block of every vector width ``source`` calls (only those: the program's compile
    time grows with its text)."""
    widths = sorted(set(_HELPER_USE.findall(source)), key=len)
    return "\n".join((_F32_MATH + _ROUND_HALF).format(t=t, it=t.replace("float", "int"), ht=t.replace("float", "ushort"),
                                                       w=t[5:]) for t in widths)


def compute_type(ct: str) -> str:
    """The C type kernels compute values of storage type ``ct`` in (float16: float)."""
    return "float" if ct == "half" else ct


def load_scalar(ct: str, ptr: str, index: str) -> str:
    """C expression reading element ``index`` of buffer ``ptr`` of storage type ``ct``."""
    return f"vload_half({index}, {ptr})" if ct == "half" else f"{ptr}[{index}]"


def store_scalar(ct: str, ptr: str, index: str, value: str) -> str:
    """C statement writing ``value`` to element ``index`` of buffer ``ptr`` of storage type ``ct``."""
    return f"vstore_half_rte({value}, {index}, {ptr});" if ct == "half" else f"{ptr}[{index}] = {value};"



def fusable(eqn) -> bool:
    """Can this equation be part of a generated elementwise kernel (see ``ELEMENTWISE``)?"""
    op = ELEMENTWISE.get(eqn.primitive)
    dts = [a.aval.dtype for a in eqn.inputs] + [eqn.out_vars[0].aval.dtype]
    if op is None or any(d not in CTYPE for d in dts) or eqn.primitive.multiple_results:
        return False
    return op.fits(eqn)


@dataclass
class Group:
    """Elementwise equations fused into one kernel (or absorbed into the reduction they feed)."""

    shape: tuple
    eqns: list = field(default_factory=list)
    sealed: bool = False

    def produced(self) -> set:
        return {v for e in self.eqns for v in e.out_vars}


# --------------------------------------------------------------------------- access patterns


def contiguous_strides(shape) -> list:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return strides[::-1]


@dataclass(frozen=True)
class View:
    """A value that is another buffer read in place: element (i_0, ..., i_k) of the view is
    ``base[offset + sum_d i_d * strides[d]]`` (strides in elements; 0 broadcasts, negative
    reverses).  Broadcasts, reshapes of contiguous data, transposes, slices and reversals are
    views: index arithmetic in the kernels that read them, never a copy."""

    base: object
    offset: int
    strides: tuple

    @staticmethod
    def of(var) -> "View":
        return View(var, 0, tuple(contiguous_strides(var.aval.shape)))

    def contiguous(self, shape) -> bool:
        return all(s == c for s, c, n in zip(self.strides, contiguous_strides(shape), shape) if n > 1)


def view_after(eqn, src: View) -> View | None:
    """The view ``eqn``'s output is of ``src``'s base, or None when it is not a strided view
    (a reshape of non-contiguous data, or a primitive not in ``VIEW_PRIMS``)."""
    rule = VIEW_PRIMS.get(eqn.primitive)
    if rule is None:
        return None
    return rule(eqn.params, eqn.inputs[0].aval.shape, eqn.out_vars[0].aval.shape, src)


def _broadcast_view(p, in_shape, out_shape, src: View) -> View:
    new = [0] * len(out_shape)
    for i, d in enumerate(p["broadcast_dimensions"]):
        new[d] = src.strides[i] if in_shape[i] != 1 else 0
    return View(src.base, src.offset, tuple(new))


def _reshape_view(p, in_shape, out_shape, src: View) -> View | None:
    if not src.contiguous(in_shape):
        return None
    return View(src.base, src.offset, tuple(contiguous_strides(out_shape)))


def _squeeze_view(p, in_shape, out_shape, src: View) -> View:
    return View(src.base, src.offset, tuple(x for i, x in enumerate(src.strides) if i not in p["dimensions"]))


def _expand_dims_view(p, in_shape, out_shape, src: View) -> View:
    it = iter(src.strides)
    return View(src.base, src.offset, tuple(0 if d in p["dimensions"] else next(it) for d in range(len(out_shape))))


def _transpose_view(p, in_shape, out_shape, src: View) -> View:
    return View(src.base, src.offset, tuple(src.strides[i] for i in p["permutation"]))


def _slice_view(p, in_shape, out_shape, src: View) -> View:
    st = src.strides
    off = src.offset + sum(a * x for a, x in zip(p["start_indices"], st))
    return View(src.base, off, tuple(x * k for x, k in zip(st, p["strides"] or (1,) * len(st))))


def _rev_view(p, in_shape, out_shape, src: View) -> View:
    st, off = list(src.strides), src.offset
    for d in p["dimensions"]:
        off += (in_shape[d] - 1) * st[d]
        st[d] = -st[d]
    return View(src.base, off, tuple(st))


# primitive -> the view its output is of its operand's base: ``rule(params, in_shape, out_shape, src)``
VIEW_PRIMS: dict = {P.broadcast_in_dim_p: _broadcast_view, P.reshape_p: _reshape_view, P.squeeze_p: _squeeze_view,
                    P.expand_dims_p: _expand_dims_view, P.transpose_p: _transpose_view, P.slice_p: _slice_view,
                    P.rev_p: _rev_view}


@dataclass
class Access:
    """How element ``e`` (flat, row-major over the kernel shape) of a kernel input is read."""

    kind: str          # "full", "scalar", "general"
    coeffs: tuple = ()  # ((divisor, modulus, stride), ...) for "general"
    inner: int = 0      # length of the contiguous innermost run (general)
    offset: int = 0

    def index(self, e: str) -> str:
        if self.kind == "full":
            return e if not self.offset else f"{self.offset} + {e}"
        terms = [f"(({e} / {d}) % {m}) * {s}" if d != 1 else f"({e} % {m}) * {s}" for d, m, s in self.coeffs]
        if self.offset or not terms:
            terms.append(str(self.offset))
        return " + ".join(terms)


def access_for(kernel_shape: tuple, src_shape: tuple, view: View | None = None) -> Access:
    """Access of a value of ``src_shape`` (a contiguous buffer, or a ``view`` of one) broadcast to
    ``kernel_shape`` by numpy's right-aligned rules."""
    nd, ns = len(kernel_shape), len(src_shape)
    strides = view.strides if view is not None else tuple(contiguous_strides(src_shape))
    offset = view.offset if view is not None else 0
    stride_of = [0] * nd
    for i in range(ns):
        if src_shape[i] != 1:
            stride_of[nd - ns + i] = strides[i]
    kstrides = contiguous_strides(kernel_shape)
    if all(s == 0 for d, s in enumerate(stride_of) if kernel_shape[d] > 1):
        return Access("scalar", offset=offset)
    if all(s == k for s, k, n in zip(stride_of, kstrides, kernel_shape) if n > 1):
        return Access("full", offset=offset)
    coeffs = tuple((kstrides[d], kernel_shape[d], stride_of[d]) for d in range(nd)
                   if stride_of[d] and kernel_shape[d] > 1)
    # contiguous innermost run: trailing kernel dims read with their natural strides
    inner = 1
    for d in range(nd - 1, -1, -1):
        if kernel_shape[d] == 1 or (stride_of[d] == kstrides[d] and inner == kstrides[d]):
            inner *= kernel_shape[d]
        else:
            break
    return Access("general", coeffs, inner, offset)


def vector_readable(access: Access, vec: int, segment: int) -> bool:
    """Can lanes e..e+vec-1 of a kernel input be read by one ``vload`` of its buffer?  Callers
    keep each vector inside one segment of ``segment`` consecutive kernel elements, starting at
    a multiple of ``vec`` within it; a vload is in bounds exactly when that puts the lanes in one
    contiguous run of the view (never across a row end of a broadcast, reversed, sliced or
    strided view, nor past its buffer's end)."""
    if access.kind == "full":
        return True
    if access.kind != "general" or not access.inner or not segment:  # (empty: nothing is read)
        return False
    return (access.inner % vec == 0 and segment % access.inner == 0) or access.inner % segment == 0


# --------------------------------------------------------------------------- code generation


def c_literal(val, ctype: str) -> str:
    v = np.asarray(val).item()
    if ctype in ("float", "double"):
        v = float(v)
        if math.isnan(v):
            text = "NAN"
        elif math.isinf(v):
            text = "INFINITY" if v > 0 else "-INFINITY"
        else:
            text = repr(v)
            if "e" not in text and "." not in text:
                text += ".0"
        return f"(({ctype}){text})"
    if ctype == "uchar":
        return "1" if v else "0"
    if ctype in ("uint", "ulong"):
        return f"(({ctype}){int(v)}{'u' if ctype == 'uint' else 'UL'})"
    return f"(({ctype}){int(v)})"


class ExprWriter:
    """Writes the body computing a group's values at element ``e`` (vector or scalar form).

    Bools live as masks in registers: ``int`` lanes of -1/0 in vector form, 1/0 scalars.
    ``segment``: the caller's vectors start at multiples of ``vec`` within segments of this many
    kernel elements and never cross a segment's end (see ``vector_readable``)."""

    def __init__(self, vector: bool, inputs: dict, accesses: dict, vec: int = VEC, tail: bool = False, *,
                 segment: int):
        self.vector = vector
        self.vec = vec
        self.tail = tail          # vector form over the last, partial vector: lanes past n masked
        self.segment = segment
        self.inputs = inputs      # Var -> parameter name
        self.accesses = accesses  # Var -> Access
        self.names: dict = {}
        self.lines: list = []
        self.count = 0
        self.staged: set = set()  # tail form: inputs copied into private arrays

    def vtype(self, ctype: str) -> str:
        if ctype == "uchar":
            return f"int{self.vec}" if self.vector else "int"
        return f"{ctype}{self.vec}" if self.vector else ctype

    def load(self, var, e: str) -> str:
        """Read kernel input ``var`` at element e (vector: elements e..e+7)."""
        p = self.inputs[var]
        acc = self.accesses[var]
        st = CTYPE[var.aval.dtype]
        ct = compute_type(st)
        if not self.vector:
            raw = load_scalar(st, p, acc.index(e))
            return f"((int){raw})" if ct == "uchar" else raw
        if acc.kind == "scalar":
            raw = f"(({ct}{self.vec})({load_scalar(st, p, acc.index(e))}))"
        elif self.tail:  # lanes at or past n read 1 (no integer division by zero)
            if var not in self.staged:
                self.staged.add(var)
                self.lines.append(f"{ct} t_{p}[{self.vec}]; for (int k = 0; k < {self.vec}; k++) "
                                  f"t_{p}[k] = {e} + k < n ? {load_scalar(st, p, acc.index(f'({e} + k)'))} : ({ct})1;")
            raw = f"vload{self.vec}(0, t_{p})"
        elif vector_readable(acc, self.vec, self.segment) and st != "half":
            raw = f"vload{self.vec}(0, {p} + {acc.index(e)})"
        else:  # lane by lane, each at its own index (float16 always: Debian's PoCL 3.1 (LLVM 15)
            # faults on a vload_half8 whose address is not 16-byte aligned, which the spec allows)
            lanes = ", ".join(load_scalar(st, p, acc.index(f"({e} + {k})")) for k in range(self.vec))
            raw = f"(({ct}{self.vec})({lanes}))"
        return f"(-convert_int{self.vec}({raw}))" if ct == "uchar" else raw

    def atom(self, a, ctype: str, e: str) -> str:
        if type(a) is Literal:
            val = np.asarray(a.val, a.aval.dtype) if a.aval.dtype == np.dtype(np.float16) else a.val
            lit = c_literal(val, ctype if a.aval.dtype != np.dtype(bool) else "uchar")
            if a.aval.dtype == np.dtype(bool):
                lit = ("-1" if np.asarray(val).item() else "0") if self.vector else lit
                return f"((int{self.vec})({lit}))" if self.vector else lit
            return f"(({ctype}{self.vec}){lit})" if self.vector else lit
        if a in self.names:
            return self.names[a]
        return self.load(a, e)

    def select(self, f: str, t: str, cond: str, ctype: str) -> str:
        """``cond ? t : f`` for values of C type ``ctype``.  Vector select() takes a mask of the
        values' lane width (long lanes for double and long); scalar select() of doubles with an
        int test is ambiguous (PoCL rejects it), so scalars use ``?:``."""
        if not self.vector:
            return f"(({cond}) ? {t} : {f})"
        return f"select({f}, {t}, convert_{MASK_OF[ctype]}{self.vec}({cond}))"

    def emit(self, eqn, e: str) -> None:
        """Define the value of ``eqn``'s output (a fresh variable) from its operands'."""
        out = eqn.out_vars[0]
        ct = compute_type(CTYPE[out.aval.dtype])
        in_ct = [compute_type(CTYPE[a.aval.dtype]) for a in eqn.inputs]
        args = [self.atom(a, c, e) for a, c in zip(eqn.inputs, in_ct)]
        value = ELEMENTWISE[eqn.primitive].write(self, eqn, args, ct, in_ct, e)
        if out.aval.dtype == np.dtype(np.float16) and not _keeps_half(eqn):
            value = f"ft_round_half_{self.vtype(ct)}({value})"
        self.names[out] = self.fresh(ct, value)

    def lanewise(self, ct: str, tmpl: str, args: list) -> str:
        """``tmpl`` applied to each lane of the (named) vector ``args`` (see ``_LANEWISE_TYPES``)."""
        if not self.vector:
            return tmpl.format(*args)
        lanes = (tmpl.format(*[f"{a}.s{'0123456789abcdef'[k]}" for a in args]) for k in range(self.vec))
        return f"(({self.vtype(ct)})({', '.join(lanes)}))"

    def fmod(self, ct: str, x: str, y: str) -> str:
        """C's fmod of the named values ``x``, ``y`` (lane by lane where its vector form is wrong)."""
        return self.lanewise(ct, "fmod({0}, {1})", [x, y]) if ct in _LANEWISE_TYPES[P.rem_p] else f"fmod({x}, {y})"

    def float_floor_div(self, ct: str, x: str, y: str, one: str, half: str) -> str:
        """numpy's float ``//`` (npy_divmod): the quotient of x minus its fmod remainder, moved
        down by one where the remainder's sign differs from y's, snapped to the nearest integer;
        x / y for y = 0.  floor(x / y) differed where x / y rounds up to an integer (1 // 0.1:
        10 for numpy's 9) and at infinities (0.5 // -inf: -0 for -1, -inf // 2: -inf for NaN)."""
        x, y = self.fresh(ct, x), self.fresh(ct, y)
        m = self.fresh(ct, self.fmod(ct, x, y))
        d = self.fresh(ct, f"({x} - {m}) / {y}")
        d = self.fresh(ct, self.select(d, f"{d} - {one}", f"({m} != 0) & (({y} < 0) != ({m} < 0))", ct))
        f = self.fresh(ct, f"floor({d})")
        f = self.fresh(ct, self.select(f, f"{f} + {one}", f"({d} - {f}) > {half}", ct))
        f = self.fresh(ct, self.select(f, f"copysign(({f} - {f}), {x} / {y})", f"{d} == 0", ct))
        return self.select(f, f"{x} / {y}", f"{y} == 0", ct)

    def int_division(self, prim, ct: str, x: str, y: str) -> str:
        """numpy's integer ``%`` (``prim``: ``rem_p``) or ``//`` (``floor_div_p``): rounded toward
        -inf (C truncates toward 0), and 0 for a zero divisor (where C's division would trap)."""
        x, y = self.fresh(ct, x), self.fresh(ct, y)
        one = self.atom(Literal(np.ones((), np.int64)), ct, "")
        pick = lambda a, b, c: self.select(a, b, c, ct)
        d = self.fresh(ct, pick(y, one, f"{y} == 0"))
        signs_differ = f"(({x} < 0) != ({d} < 0))"
        if prim is P.rem_p:
            r = self.fresh(ct, f"{x} % {d}")
            r = self.fresh(ct, pick(r, f"{r} + {d}", f"({r} != 0) & (({r} < 0) != ({d} < 0))"))
        else:
            r = self.fresh(ct, f"{x} / {d}")
            r = self.fresh(ct, pick(r, f"{r} - {one}", f"(({x} % {d}) != 0) & {signs_differ}"))
        return pick(r, f"({r} - {r})", f"{y} == 0")

    def fresh(self, ctype: str, expr: str) -> str:
        name = f"t{self.count}"
        self.count += 1
        self.lines.append(f"{self.vtype(ctype)} {name} = {expr};")
        return name


# --------------------------------------------------------------------------- the elementwise table

_KIND = {"half": "f", "float": "f", "double": "f", "int": "i", "long": "i", "uchar": "b", "uint": "i", "ulong": "i"}


@dataclass(frozen=True)
class Op:
    """How generated kernels compute one elementwise primitive: a C template per output type --
    ``f`` float / double, ``i`` int / long, ``b`` bool (as int masks) -- over operands ``{0}``,
    ``{1}`` (``{one}``: 1 of the type), a type without one not fused; or ``writer(w, eqn, args,
    ct, in_ct, e)`` (``w`` the ExprWriter) and ``fits(eqn)`` for what a template cannot say."""

    f: str | None = None
    i: str | None = None
    b: str | None = None
    writer: object = None
    fits_eqn: object = None

    def fits(self, eqn) -> bool:
        if self.fits_eqn is not None:
            return self.fits_eqn(eqn)
        return getattr(self, _KIND[CTYPE[eqn.out_vars[0].aval.dtype]]) is not None

    def write(self, w: ExprWriter, eqn, args: list, ct: str, in_ct: list, e: str) -> str:
        if self.writer is not None:
            return self.writer(w, eqn, args, ct, in_ct, e)
        kind = _KIND[ct]
        if kind == "f":
            return _write_float(w, eqn, getattr(self, kind), args, ct, e)
        return getattr(self, kind).format(*args)


# float32 operations written as macros whose form the device kind and device choose (``policy``):
# sin / cos as FT_SIN_<type> / FT_COS_<type> (the cpu kind: PoCL's native forms, measured 5x faster
# and within 1.2e-7 of sin / cos on |x| <= 1e4, used only when every lane lies within that bound --
# they return 0 past ~1.7e6 -- else, and elsewhere, lane by lane, as a GPU computes them anyway:
# PoCL's vector forms are wrong next to 0, inf or NaN); a corrected division and sqrt on a device
# that does not round them correctly
_F32_MACROS = {P.div_p: "FT_FDIV({0}, {1})", P.sqrt_p: "FT_FSQRT({0})"}
_F32_POLICY_MACROS = {P.sin_p: "FT_SIN", P.cos_p: "FT_COS"}  # + _<vector type>(operand): see policy.py
_F32_OWN_MATH = {P.exp_p: "ft_exp", P.tanh_p: "ft_tanh", P.log_p: "ft_log", P.log1p_p: "ft_log1p"}  # see _F32_MATH


def _write_float(w: ExprWriter, eqn, tmpl: str, args: list, ct: str, e: str) -> str:
    """A float template, with the builtins PoCL does better or worse swapped (``_F32_MACROS``, our
    float32 exp / tanh / log / log1p, lane-by-lane calls where its vector forms are wrong)."""
    prim = eqn.primitive
    one = w.atom(Literal(np.ones((), eqn.out_vars[0].aval.dtype)), ct, e)
    if ct == "float" and prim in _F32_POLICY_MACROS:  # (a named operand: the gpu kind's macro reads each lane)
        return f"{_F32_POLICY_MACROS[prim]}_{w.vtype(ct)}({w.fresh(ct, args[0])})"
    if ct == "float" and prim in _F32_MACROS:
        tmpl = _F32_MACROS[prim]
    elif ct == "float" and prim in _F32_OWN_MATH:
        tmpl = f"{_F32_OWN_MATH[prim]}_{w.vtype(ct)}({{0}})"
    elif ct == "float" and prim is P.logistic_p:
        tmpl = tmpl.replace("exp(", f"ft_exp_{w.vtype(ct)}(")
    if ct in _LANEWISE_TYPES.get(prim, ()):
        return w.lanewise(ct, tmpl, [w.fresh(ct, a) for a in args])
    return tmpl.format(*args, one=one)


def _nan_propagating(builtin: str, nan_value: str, nan_test: str, int_template: str | None = None) -> Op:
    """A float builtin whose result numpy's differs from at a NaN operand (OpenCL's sign(NaN) is
    0, fmax / fmin drop a NaN): ``nan_value`` where ``nan_test`` holds; integers (if
    ``int_template``) need no such care."""
    def write(w, eqn, args, ct, in_ct, e):
        if _KIND[ct] != "f":
            return int_template.format(*args)
        args = [w.fresh(ct, a) for a in args]
        expr = _write_float(w, eqn, builtin, args, ct, e)
        return w.select(expr, nan_value.format(*args), nan_test.format(*args), ct)
    kinds = "fiu" if int_template is not None else "f"
    return Op(writer=write, fits_eqn=lambda eqn: eqn.out_vars[0].aval.dtype.kind in kinds)


def _write_rem(w, eqn, args, ct, in_ct, e):
    """numpy's %: for floats C's exact fmod moved to the divisor's sign (with an infinite divisor,
    x or +-inf; x - floor(x / y) * y gave NaN there); for integers see ``int_division``."""
    if _KIND[ct] != "f":
        return w.int_division(P.rem_p, ct, *args)
    x, y = (w.fresh(ct, a) for a in args)
    m = w.fresh(ct, w.fmod(ct, x, y))
    r = w.fresh(ct, w.select(m, f"{m} + {y}", f"({m} != 0) & (({m} < 0) != ({y} < 0))", ct))
    return w.select(r, f"copysign({r}, {y})", f"{r} == 0", ct)


def _write_floor_div(w, eqn, args, ct, in_ct, e):
    if _KIND[ct] != "f":
        return w.int_division(P.floor_div_p, ct, *args)
    dtype = eqn.out_vars[0].aval.dtype
    one, half = (w.atom(Literal(np.array(v, dtype)), ct, e) for v in (1, 0.5))
    return w.float_floor_div(ct, *args, one=one, half=half)


def _write_convert(w, eqn, args, ct, in_ct, e):
    src = in_ct[0]
    vec = w.vec if w.vector else ""
    if ct == "uchar":
        cmp = f"({args[0]} != (({src}{vec})0))" if src != "uchar" else args[0]
        return f"convert_int{w.vec}({cmp})" if w.vector and src in _WIDE else cmp
    if src == "uchar":
        return f"convert_{ct}{w.vec}(-{args[0]})" if w.vector else f"(({ct}){args[0]})"
    if src == "double" and eqn.out_vars[0].aval.dtype == np.dtype(np.float16):
        return _double_to_float_odd(w, args[0])
    return f"convert_{ct}{w.vec}({args[0]})" if w.vector else f"(({ct}){args[0]})"


def _double_to_float_odd(w, x: str) -> str:
    """A double as a float rounded to odd (toward zero, lowest bit set when inexact): rounding
    that to float16 then rounds the double once, as numpy's float64 -> float16 cast does
    (rounding to the nearest float first could make a float16 tie of what was none)."""
    vec = w.vec if w.vector else ""
    x = w.fresh("double", x)
    f = w.fresh("float", f"convert_float{vec}_rtz({x})")
    inexact = f"(convert_int{vec}(convert_double{vec}({f}) != {x}) & 1)" if w.vector \
        else f"(convert_double({f}) != {x})"
    return f"as_{w.vtype('float')}(as_{w.vtype('int')}({f}) | {inexact})"


# float16 results of float16 operands that are float16 values already (no rounding needed)
_HALF_EXACT = {P.neg_p, P.abs_p, P.max_p, P.min_p, P.select_p, P.stop_gradient_p, P.floor_p, P.ceil_p,
               P.round_p, P.sign_p, P.copysign_p}


def _keeps_half(eqn) -> bool:
    return eqn.primitive in _HALF_EXACT and all(a.aval.dtype.kind != "f" or a.aval.dtype == np.dtype(np.float16)
                                                for a in eqn.inputs)


def _comparison(symbol: str) -> Op:
    """A comparison: a mask (``int`` lanes; long comparisons converted), bools not compared."""
    def write(w, eqn, args, ct, in_ct, e):
        expr = f"({args[0]} {symbol} {args[1]})"
        return f"convert_int{w.vec}{expr}" if w.vector and in_ct[0] in _WIDE else expr
    return Op(writer=write, fits_eqn=lambda eqn: eqn.inputs[0].aval.dtype != np.dtype(bool))


def _write_is_finite(w, eqn, args, ct, in_ct, e):  # a mask, like a comparison
    expr = f"isfinite({args[0]})"
    return f"convert_int{w.vec}({expr})" if w.vector and in_ct[0] == "double" else expr


def _write_integer_pow(w, eqn, args, ct, in_ct, e):
    y = eqn.params["y"]
    one = w.atom(Literal(np.ones((), eqn.out_vars[0].aval.dtype)), ct, e)
    if y == 0:
        return one
    base = w.fresh(ct, args[0])
    prod = " * ".join([base] * abs(y))
    return f"({prod})" if y > 0 else f"({one} / ({prod}))"


_always = lambda eqn: True  # noqa: E731


def _write_shift(symbol: str):
    """``x << y`` / ``x >> y`` (unsigned: logical); 0 where y is at least the width, as XLA's
    (OpenCL takes y modulo the width)."""
    def write(w, eqn, args, ct, in_ct, e):
        x, y = (w.fresh(ct, a) for a in args)
        bits = eqn.out_vars[0].aval.dtype.itemsize * 8
        return w.select(f"({x} {symbol} {y})", f"({x} - {x})", f"({y} >= {bits})", ct)
    return Op(writer=write, fits_eqn=lambda eqn: eqn.out_vars[0].aval.dtype.kind in "iu")


def _write_bitcast(w, eqn, args, ct, in_ct, e):
    return f"as_{w.vtype(ct)}({args[0]})"


def _write_erf_inv(w, eqn, args, ct, in_ct, e):
    """Giles' polynomial (special.ERF_INV_*) with fused multiply-adds; double refines it as
    ``primitives/special.py`` (the numpy implementation) does: Halley on erf, Newton on log(erfc)
    above ``special.ERF_INV_TAIL_FROM`` (both lanes' steps computed, selected per lane; extra Halley
    steps on a converged lane change nothing)."""
    vt = w.vtype(ct)
    k = lambda v: f"(({vt}){float(v)!r})"
    x = w.fresh(ct, args[0])
    lw = w.fresh(ct, f"(-log1p(-{x} * {x}))")
    central = f"({lw} < {k(5.0)})"
    u = w.fresh(ct, w.select(f"(sqrt({lw}) - {k(3.0)})", f"({lw} - {k(2.5)})", central, ct))
    p = w.fresh(ct, w.select(k(special.ERF_INV_TAIL[0]), k(special.ERF_INV_CENTRAL[0]), central, ct))
    for c, d in zip(special.ERF_INV_CENTRAL[1:], special.ERF_INV_TAIL[1:]):
        p = w.fresh(ct, f"fma({p}, {u}, {w.select(k(d), k(c), central, ct)})")
    z = w.fresh(ct, f"({p} * {x})")
    if ct == "double":
        a = w.fresh(ct, f"fabs({x})")
        z = w.fresh(ct, f"fabs({z})")
        for _ in range(max(special.ERF_INV_STEPS)):
            dens = w.fresh(ct, f"({k(2 / math.sqrt(math.pi))} * exp(-{z} * {z}))")
            miss, ec = w.fresh(ct, f"(erf({z}) - {a})"), w.fresh(ct, f"erfc({z})")
            step = w.select(f"({miss} / ({dens} + {z} * {miss}))", f"((log1p(-{a}) - log({ec})) * {ec} / {dens})",
                            f"({a} > {k(special.ERF_INV_TAIL_FROM)})", ct)
            z = w.fresh(ct, w.select(z, f"({z} - {step})", f"isfinite({z}) & ({dens} > {k(0.0)})", ct))
        z = w.fresh(ct, f"copysign({z}, {x})")
    return w.select(z, f"({x} * INFINITY)", f"(fabs({x}) == {k(1.0)})", ct)

# primitive -> how generated kernels compute it; a primitive not here is not fused
ELEMENTWISE: dict = {
    P.add_p: Op(f="({0} + {1})", i="({0} + {1})"), P.sub_p: Op(f="({0} - {1})", i="({0} - {1})"),
    P.mul_p: Op(f="({0} * {1})", i="({0} * {1})"), P.div_p: Op(f="({0} / {1})"),
    P.neg_p: Op(f="(-{0})", i="(-{0})"),
    P.sin_p: Op(f="sin({0})"), P.cos_p: Op(f="cos({0})"), P.tan_p: Op(f="tan({0})"), P.tanh_p: Op(f="tanh({0})"),
    P.exp_p: Op(f="exp({0})"), P.log_p: Op(f="log({0})"), P.log1p_p: Op(f="log1p({0})"),
    P.expm1_p: Op(f="expm1({0})"), P.sqrt_p: Op(f="sqrt({0})"), P.rsqrt_p: Op(f="rsqrt({0})"),
    P.abs_p: Op(f="fabs({0})"), P.floor_p: Op(f="floor({0})"), P.ceil_p: Op(f="ceil({0})"),
    P.round_p: Op(f="rint({0})"), P.logistic_p: Op(f="({one} / ({one} + exp(-{0})))"),
    P.pow_p: Op(f="pow({0}, {1})"), P.atan2_p: Op(f="atan2({0}, {1})"), special.erf_p: Op(f="erf({0})"),
    P.stop_gradient_p: Op(f="{0}", i="{0}", b="{0}"),
    special.erfc_p: Op(f="erfc({0})"),
    special.sinh_p: Op(f="sinh({0})"), special.cosh_p: Op(f="cosh({0})"), special.asinh_p: Op(f="asinh({0})"),
    special.acosh_p: Op(f="acosh({0})"), special.hypot_p: Op(f="hypot({0}, {1})"), special.exp2_p: Op(f="exp2({0})"),
    P.sign_p: _nan_propagating("sign({0})", "{0}", "isnan({0})"),
    P.max_p: _nan_propagating("fmax({0}, {1})", "({0} + {1})", "isnan({0}) | isnan({1})", "max({0}, {1})"),
    P.min_p: _nan_propagating("fmin({0}, {1})", "({0} + {1})", "isnan({0}) | isnan({1})", "min({0}, {1})"),
    P.rem_p: Op(writer=_write_rem, fits_eqn=lambda e: e.out_vars[0].aval.dtype.kind in "fiu"),
    P.floor_div_p: Op(writer=_write_floor_div, fits_eqn=lambda e: e.out_vars[0].aval.dtype.kind in "fiu"),
    P.and_p: Op(i="({0} & {1})", b="({0} & {1})"), P.or_p: Op(i="({0} | {1})", b="({0} | {1})"),
    P.xor_p: Op(i="({0} ^ {1})", b="({0} ^ {1})"),
    P.not_p: Op(writer=lambda w, eqn, args, ct, in_ct, e: f"(~{args[0]})" if w.vector else f"(!{args[0]})",
                fits_eqn=_always),
    P.eq_p: _comparison("=="), P.ne_p: _comparison("!="), P.lt_p: _comparison("<"),
    P.le_p: _comparison("<="), P.gt_p: _comparison(">"), P.ge_p: _comparison(">="),
    P.is_finite_p: Op(writer=_write_is_finite, fits_eqn=lambda e: e.inputs[0].aval.dtype.kind == "f"),
    P.select_p: Op(writer=lambda w, eqn, args, ct, in_ct, e: w.select(args[2], args[1], args[0], ct), fits_eqn=_always),
    P.integer_pow_p: Op(writer=_write_integer_pow, fits_eqn=lambda e: e.out_vars[0].aval.dtype.kind == "f"),
    P.convert_element_type_p: Op(writer=_write_convert, fits_eqn=_always),
    P.shift_left_p: _write_shift("<<"), P.shift_right_logical_p: _write_shift(">>"),
    P.bitcast_convert_type_p: Op(writer=_write_bitcast, fits_eqn=lambda e: np.dtype(bool) not in
                                 (e.inputs[0].aval.dtype, e.out_vars[0].aval.dtype)),
    special.erf_inv_p: Op(writer=_write_erf_inv, fits_eqn=lambda e: e.out_vars[0].aval.dtype.kind == "f"),
    P.cbrt_p: Op(f="cbrt({0})"), P.copysign_p: Op(f="copysign({0}, {1})"),
    P.fmod_p: Op(writer=lambda w, eqn, args, ct, in_ct, e: w.fmod(ct, *(w.fresh(ct, a) for a in args)),
                 fits_eqn=lambda e: e.out_vars[0].aval.dtype.kind == "f"),
    P.signbit_p: Op(writer=lambda w, eqn, args, ct, in_ct, e: _mask(w, f"signbit({args[0]})", in_ct[0]),
                    fits_eqn=lambda e: e.inputs[0].aval.dtype.kind == "f"),
}


def _mask(w, expr: str, src_ct: str) -> str:
    """A float test's result as a mask (``int`` lanes, like a comparison's; double vectors give long)."""
    return f"convert_int{w.vec}({expr})" if w.vector and src_ct == "double" else expr


def group_inputs(group: Group) -> list:
    """Values read by the group but produced outside it (in first-use order)."""
    produced = group.produced()
    seen: dict = {}
    for eqn in group.eqns:
        for a in eqn.inputs:
            if type(a) is not Literal and a not in produced:
                seen.setdefault(a, None)
    return list(seen)


def _params(inputs: list, names: dict, outputs: list, out_names: dict) -> str:
    ps = [f"__global const {CTYPE[v.aval.dtype]}* restrict {names[v]}" for v in inputs]
    ps += [f"__global {CTYPE[v.aval.dtype]}* restrict {out_names[v]}" for v in outputs]
    return ", ".join(ps)


def _store(writer: ExprWriter, var, ptr: str, e: str, streaming: bool = False) -> str:
    val = writer.names.get(var)
    if val is None:  # an output that is a kernel input passed through
        val = writer.load(var, e)
    st = CTYPE[var.aval.dtype]
    ct = compute_type(st)
    if writer.vector:
        v = writer.vec
        if ct == "uchar":
            val = f"convert_uchar{v}(-({val}))"
        if writer.tail:
            return (f"{{ {ct} t[{v}]; vstore{v}({val}, 0, t); "
                    f"for (int k = 0; k < {v} && {e} + k < n; k++) {store_scalar(st, ptr, f'{e} + k', 't[k]')} }}")
        if st == "half":  # (no non-temporal form)
            return f"vstore_half{v}_rte({val}, 0, {ptr} + {e});"
        if streaming:  # whole aligned vectors (buffers start aligned; e is a multiple of v)
            return f"FT_STREAM_STORE({val}, (__global {ct}{v}*)({ptr} + {e}));"
        return f"vstore{v}({val}, 0, {ptr} + {e});"
    if ct == "uchar":
        return f"{ptr}[{e}] = (uchar)({val} != 0);"
    return store_scalar(st, ptr, e, val)


def elementwise_kernel(name: str, group: Group, outputs: list, accesses: dict, vec: int = VEC,
                       streaming: bool = False) -> tuple[str, list]:
    """Source of one fused elementwise kernel; returns (source, input vars).  ``streaming``: the
    outputs bypass the caches (non-temporal stores), for kernels whose data outgrow them."""
    inputs = group_inputs(group)
    in_names = {v: f"in{i}" for i, v in enumerate(inputs)}
    out_names = {v: f"out{i}" for i, v in enumerate(outputs)}
    bodies = []
    n = shape_size(group.shape)
    ragged = n % vec != 0  # else no partial vector: no tail code (compiles faster)
    for tail in (False, True)[:1 + ragged]:  # the tail: the same vector code on masked lanes (a
        w = ExprWriter(True, in_names, accesses, vec, tail, segment=n)  # scalar loop there: 15% slower)
        for eqn in group.eqns:
            w.emit(eqn, "base")
        stores = [_store(w, v, out_names[v], "base", streaming and not tail) for v in outputs]
        bodies.append("\n        ".join(w.lines + stores))
    tail = f""" else if (base < n) {{
        {bodies[1]}
    }}""" if ragged else ""
    src = f"""
__kernel void {name}({_params(inputs, in_names, outputs, out_names)}, const long n) {{
    const long base = (long)get_global_id(0) * {vec};
    if (base + {vec} <= n) {{
        {bodies[0]}
    }}{tail}
}}"""
    return src, inputs


def reduce_init(kind, ct: str) -> str:
    """The identity of reduction ``kind`` (one of ``REDUCTIONS``) in C (the accumulator's start value)."""
    if kind in (P.reduce_sum_p, P.reduce_prod_p):
        return "0" if kind is P.reduce_sum_p else "1"
    if ct == "uchar":  # bool: any / all
        return {P.reduce_max_p: "0", P.reduce_min_p: "1"}[kind]
    if ct in ("uint", "ulong"):
        return {P.reduce_max_p: "0", P.reduce_min_p: "UINT_MAX" if ct == "uint" else "ULONG_MAX"}[kind]
    if ct in ("int", "long"):
        return {P.reduce_max_p: f"({ct})(-0x7fffffff - 1)" if ct == "int" else "LONG_MIN",
                P.reduce_min_p: "INT_MAX" if ct == "int" else "LONG_MAX"}[kind]
    return {P.reduce_max_p: "-INFINITY", P.reduce_min_p: "INFINITY"}[kind]


def reduce_combine(kind, ct: str, acc: str, v: str, vector: bool) -> str:
    """C statement folding ``v`` into ``acc`` for reduction ``kind`` (one of ``REDUCTIONS``; max/min
    propagate NaN, as numpy's do)."""
    if kind is P.reduce_sum_p:
        return f"{acc} += {v};"
    if kind is P.reduce_prod_p:
        return f"{acc} *= {v};"
    cmp = ">" if kind is P.reduce_max_p else "<"
    if _KIND[ct] != "f":  # integers and bools have no NaN (a fused bool operand is an int comparison result)
        return f"{acc} = {'max' if kind is P.reduce_max_p else 'min'}({acc}, ({ct})({v}));"
    if vector:
        return f"{acc} = select({acc}, {v}, ({v} {cmp} {acc}) | isnan({v}));"
    return f"{acc} = (({v} {cmp} {acc}) || isnan({v})) ? {v} : {acc};"


def _reduce_operand(x, group: Group | None, in_names: dict, accesses: dict, vec: int, vector: bool,
                    e: str, segment: int) -> tuple[list, str]:
    """Lines computing a reduction's operand at element ``e`` (inline from an absorbed ``group``,
    else one load) and the name of its value; vectors stay in ``segment``s (see ExprWriter)."""
    w = ExprWriter(vector, in_names, accesses, vec, segment=segment)
    w.count = 1000 if vector else 0
    if group is None:
        return [], w.load(x, e)
    for eqn in group.eqns:
        w.emit(eqn, e)
    return w.lines, w.names[x]


def _reduction_parts(reduce_eqn, group: Group | None) -> tuple:
    """What every reduction kernel's writer starts from: (the operand, the reduction primitive, the
    output's storage C type, the type it accumulates in -- float16 in float, rounded once at the
    end --, the kernel's inputs -- the absorbed group's, else the operand --, their C names)."""
    x = reduce_eqn.inputs[0]
    st = CTYPE[reduce_eqn.out_vars[0].aval.dtype]
    inputs = group_inputs(group) if group is not None else [x]
    return x, reduce_eqn.primitive, st, compute_type(st), inputs, {v: f"in{i}" for i, v in enumerate(inputs)}


def _halving_tree(kind, ct: str, slot: str, lane: str, width: int) -> str:
    """C: the ``width`` partial results ``slot`` holds at ``lane`` = 0, 1, ... (in local memory; ``{}``
    in ``slot`` stands for the lane) combined into lane 0, halving in a fixed order."""
    combine = reduce_combine(kind, ct, slot.format(lane), slot.format(f"{lane} + width"), False)
    return f"""for (int width = {width // 2}; width > 0; width >>= 1) {{
        barrier(CLK_LOCAL_MEM_FENCE);
        if ({lane} < width) {{ {combine} }}
    }}"""


def _reduction_indexing(reduce_eqn) -> tuple:
    """(R, the terms of output ``o``'s base offset, the terms of reduced element ``r``'s offset --
    both in the operand's flat index space --, whether the reduced axes are the trailing ones)."""
    xshape = reduce_eqn.inputs[0].aval.shape
    axes = reduce_eqn.params["axes"]
    kept = [d for d in range(len(xshape)) if d not in axes]
    xstrides = contiguous_strides(xshape)
    kept_shape = [xshape[d] for d in kept]
    red_shape = [xshape[d] for d in axes]
    kept_cs, red_cs = contiguous_strides(kept_shape), contiguous_strides(red_shape)
    base_terms = [f"((o / {kept_cs[k]}) % {kept_shape[k]}) * {xstrides[d]}" for k, d in enumerate(kept)
                  if kept_shape[k] > 1] or ["0"]
    red_terms = [f"((r / {red_cs[k]}) % {red_shape[k]}) * {xstrides[d]}" for k, d in enumerate(axes)
                 if red_shape[k] > 1] or ["0"]
    contiguous_tail = tuple(axes) == tuple(range(len(xshape) - len(axes), len(xshape)))
    return shape_size(red_shape), base_terms, red_terms, contiguous_tail


def reduction_kernel(name: str, reduce_eqn, group: Group | None, accesses: dict, chunks: int,
                     vec: int = VEC) -> tuple[str, list]:
    """Source of a reduction kernel; with ``group`` the operand is computed inline.

    Work-item ``gid`` computes output ``gid / chunks`` over the ``gid % chunks``-th slice of the
    reduced elements (chunks > 1 writes partial results that a second pass combines).  When the
    reduced axes are the trailing ones, vectors of ``vec`` of them are read at once; every slice
    then starts at a multiple of ``vec`` within its output's row of R elements, so no vector
    crosses a row of a view it reads (see ``vector_readable``)."""
    x, kind, st, ct, inputs, in_names = _reduction_parts(reduce_eqn, group)
    R, base_terms, red_terms, contiguous_tail = _reduction_indexing(reduce_eqn)
    init = reduce_init(kind, ct)
    combine = lambda acc, v, vector: reduce_combine(kind, ct, acc, v, vector)
    s_lines, s_val = _reduce_operand(x, group, in_names, accesses, vec, False, "e", R)
    vec_loop = ""
    per = -(-R // chunks)
    if contiguous_tail and R >= vec and ct in ("float", "double"):
        per = -(-per // vec) * vec  # slices start on vector boundaries (the last ones may be empty)
        v_lines, v_val = _reduce_operand(x, group, in_names, accesses, vec, True, "e", R)
        lane = lambda k: "vacc.s" + "0123456789abcdef"[k]
        hsum = {P.reduce_sum_p: " + ".join(lane(k) for k in range(vec)),
                P.reduce_prod_p: " * ".join(lane(k) for k in range(vec))}.get(kind)
        fold = ""
        if hsum is None:  # max / min: lane by lane, NaN kept (fmax / fmin would drop it)
            hsum, fold = lane(0), " ".join(combine("h", lane(k), False) for k in range(1, vec))
        vec_loop = f"""
    {ct}{vec} vacc = ({ct}{vec})({init});
    for (; r + {vec} <= r_end; r += {vec}) {{
        const long e = xbase + r;
        {chr(10).join('        ' + l for l in v_lines).strip()}
        {combine('vacc', v_val, True)}
    }}
    {{ {ct} h = {hsum}; {fold} {combine('acc', 'h', False)} }}"""
    src = f"""
__kernel void {name}({_params(inputs, in_names, [], {})}, __global {st}* restrict out0) {{
    const long gid = get_global_id(0);
    const long o = gid / {chunks};
    const long chunk = gid % {chunks};
    long r = chunk * {per};
    const long r_end = min((long){R}, r + {per});
    const long xbase = {' + '.join(base_terms)};
    {ct} acc = {init};{vec_loop if contiguous_tail else ''}
    for (; r < r_end; r++) {{
        const long e = xbase + {' + '.join(red_terms) if not contiguous_tail else 'r'};
        {chr(10).join('        ' + l for l in s_lines).strip()}
        {combine('acc', s_val, False)}
    }}
    {store_scalar(st, "out0", "gid", "acc")}
}}"""
    return src, inputs


def tree_reduction_kernel(name: str, reduce_eqn, group: Group | None, accesses: dict, chunks: int,
                          work_group: int) -> tuple[str, list]:
    """Source of a reduction for the gpu kind: work-group ``g`` reduces the ``g % chunks``-th slice
    of output ``g / chunks``'s terms, its ``work_group`` work-items striding over the slice
    (neighbours read neighbouring elements when the reduced axes are the trailing ones), then
    halving a tree of their partial results in local memory; work-item 0 stores the group's
    result (chunks > 1: partial results a second pass combines).  A fixed order: the same bits
    on every run."""
    x, kind, st, ct, inputs, in_names = _reduction_parts(reduce_eqn, group)
    R, base_terms, red_terms, contiguous_tail = _reduction_indexing(reduce_eqn)
    s_lines, s_val = _reduce_operand(x, group, in_names, accesses, 1, False, "e", R)
    per = -(-R // chunks)
    ot = ct if chunks > 1 else st  # slices' partial results in the compute type (float16: float)
    src = f"""
__kernel __attribute__((reqd_work_group_size({work_group}, 1, 1)))
void {name}({_params(inputs, in_names, [], {})}, __global {ot}* restrict out0) {{
    __local {ct} part[{work_group}];
    const long group = get_group_id(0);
    const long o = group / {chunks};
    const int lid = get_local_id(0);
    const long r_end = min((long){R}, (group % {chunks}) * {per} + {per});
    const long xbase = {' + '.join(base_terms)};
    {ct} acc = {reduce_init(kind, ct)};
    for (long r = (group % {chunks}) * {per} + lid; r < r_end; r += {work_group}) {{
        const long e = xbase + {' + '.join(red_terms) if not contiguous_tail else 'r'};
        {chr(10).join('        ' + l for l in s_lines).strip()}
        {reduce_combine(kind, ct, 'acc', s_val, False)}
    }}
    part[lid] = acc;
    {_halving_tree(kind, ct, "part[{}]", "lid", work_group)}
    if (lid == 0) {{ {store_scalar(ot, "out0", "group", "part[0]")} }}
}}"""
    return src, inputs


def column_tree_kernel(name: str, reduce_eqn, group: Group | None, accesses: dict, chunks: int,
                       columns: int, lanes: int) -> tuple[str, list]:
    """Source of a reduction over the leading axes for the gpu kind, ``x`` viewed as (R, C) -> (C,):
    a work-group of ``columns`` x ``lanes`` work-items covers ``columns`` neighbouring columns
    (neighbours read neighbouring elements) over the ``get_group_id(1)``-th of ``chunks`` slices
    of the rows, lane ``l`` summing rows ``l, l + lanes, ...`` of it; the lanes' results are halved
    in local memory into the slice's partial result at ``[slice][column]`` (a second pass combines
    the slices when there are several).  A fixed order: the same bits on every run."""
    x, kind, st, ct, inputs, in_names = _reduction_parts(reduce_eqn, group)
    C = shape_size(reduce_eqn.out_vars[0].aval.shape)
    R = shape_size(x.aval.shape) // C
    lines, val = _reduce_operand(x, group, in_names, accesses, 1, False, "e", C)
    per = -(-R // chunks)
    ot = ct if chunks > 1 else st  # slices' partial results in the compute type (float16: float)
    src = f"""
__kernel __attribute__((reqd_work_group_size({columns}, {lanes}, 1)))
void {name}({_params(inputs, in_names, [], {})}, __global {ot}* restrict out0) {{
    __local {ct} part[{lanes}][{columns}];
    const int lc = get_local_id(0), lr = get_local_id(1);
    const long c = (long)get_group_id(0) * {columns} + lc;
    const long r0 = (long)get_group_id(1) * {per};
    const long r_end = min((long){R}, r0 + {per});
    {ct} acc = {reduce_init(kind, ct)};
    if (c < {C}) {{
        for (long r = r0 + lr; r < r_end; r += {lanes}) {{
            const long e = r * {C} + c;
            {chr(10).join('            ' + l for l in lines).strip()}
            {reduce_combine(kind, ct, 'acc', val, False)}
        }}
    }}
    part[lr][lc] = acc;
    {_halving_tree(kind, ct, "part[{}][lc]", "lr", lanes)}
    if (lr == 0 && c < {C}) {{ {store_scalar(ot, "out0", f"get_group_id(1) * {C}L + c", "part[0][lc]")} }}
}}"""
    return src, inputs


def leading_axes(reduce_eqn) -> bool:
    """Does the reduction run over the leading axes only (a column sum of a row-major matrix)?"""
    axes = tuple(reduce_eqn.params["axes"])
    return len(axes) > 0 and axes == tuple(range(len(axes))) and len(axes) < len(reduce_eqn.inputs[0].aval.shape)


def column_reduction_kernel(name: str, reduce_eqn, group: Group | None, accesses: dict,
                            vec: int = VEC) -> tuple[str, list]:
    """Source of a reduction over the leading axes, ``x`` viewed as (R, C) -> (C,): work-item
    ``gid`` accumulates ``vec`` adjacent columns as one vector over all R rows (unit-stride
    loads; a scalar loop for the last, partial group of columns)."""
    x, kind, st, ct, inputs, in_names = _reduction_parts(reduce_eqn, group)
    C = shape_size(reduce_eqn.out_vars[0].aval.shape)
    R = shape_size(x.aval.shape) // C
    init = reduce_init(kind, ct)

    def body(vector: bool) -> str:
        lines, val = _reduce_operand(x, group, in_names, accesses, vec, vector, "e", C)
        return "\n            ".join(lines + [reduce_combine(kind, ct, "vacc" if vector else "acc", val, vector)])

    src = f"""
__kernel void {name}({_params(inputs, in_names, [], {})}, __global {st}* restrict out0) {{
    const long c0 = (long)get_global_id(0) * {vec};
    if (c0 + {vec} <= {C}) {{
        {ct}{vec} vacc = ({ct}{vec})({init});
        for (long r = 0; r < {R}; r++) {{
            const long e = r * {C} + c0;
            {body(True)}
        }}
        vstore{'_half' if st == 'half' else ''}{vec}{'_rte' if st == 'half' else ''}(vacc, 0, out0 + c0);
    }} else {{
        for (long c = c0; c < {C}; c++) {{
            {ct} acc = {init};
            for (long r = 0; r < {R}; r++) {{
                const long e = r * {C} + c;
                {body(False)}
            }}
            {store_scalar(st, "out0", "c", "acc")}
        }}
    }}
}}"""
    return src, inputs
