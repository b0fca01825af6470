"""Generated kernels for the primitives that only move elements: ``pad``, ``concatenate``, and
``reshape`` of a strided view (which no view can express: it is copied in row-major order).

A work-item computes, from an output element's coordinates, which input element (if any) it
copies, and copies a run of up to 64 consecutive elements where they stay consecutive in the
input (``run_length``).  Inputs are read through their ``Access`` (``fusion.access_for``), so
a slice, transpose or broadcast feeding them is read in place: the im2col of ``nn.conv2d``
(slices of a padded image, stacked) runs as one pad kernel and one concatenate kernel.
Shapes are compile-time constants of the generated source, as in the fused kernels.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from ... import primitives as P
from ...core import Literal
from ...transforms.optimize import shape_size
from .fusion import CTYPE, Access, c_literal, contiguous_strides

LAYOUT_PRIMS: dict = {}  # primitive -> its LayoutRule (filled below the rules)


def layout_inputs(eqn) -> list:
    """The distinct array operands a layout kernel reads (a literal padding value is inlined)."""
    return list(dict.fromkeys(v for v in eqn.inputs if type(v) is not Literal))


def run_length(eqn, accesses: dict) -> int:
    """Consecutive output elements one work-item copies (a power of two up to 64): a run maps to
    consecutive elements of every input, so its index arithmetic is done once per run."""
    run = LAYOUT_PRIMS[eqn.primitive].run(eqn)
    return 1 if run is None else _run_for(run, [accesses[v] for v in layout_inputs(eqn)])


def _run_for(run: int, accesses: list) -> int:
    for a in accesses:
        if a.kind == "general":
            run = math.gcd(run, a.inner)
    return math.gcd(run, 64) if run else 1


def layout_kernel(name: str, eqn, accesses: dict, run: int) -> str:
    """OpenCL source of kernel ``name`` for a ``pad``, ``concatenate`` or ``reshape`` equation;
    ``accesses`` maps each of ``layout_inputs(eqn)`` to how its contiguous flat index reaches its
    buffer.  Parameters: the inputs' buffers, the output buffer, ``long n`` (work-items: output
    size / ``run``)."""
    ins = layout_inputs(eqn)
    names = {v: f"in{i}" for i, v in enumerate(ins)}
    reads = [(names[v], accesses[v], shape_size(v.aval.shape)) for v in ins]
    write = LAYOUT_PRIMS[eqn.primitive].body
    out = eqn.out_vars[0].aval
    ct = bits_type(out.dtype)
    return _kernel(name, ct, reads, shape_size(out.shape), run,
                   lambda it, copy: write(eqn, accesses, names, ct, it, copy))


def bits_type(dtype) -> str:
    """The C type layout kernels copy elements of ``dtype`` as (float16: its bits, as ushort)."""
    return "ushort" if np.dtype(dtype) == np.dtype(np.float16) else CTYPE[np.dtype(dtype)]


def copy_kernel(name: str, ctype: str, shape: tuple, access: Access) -> tuple[str, int]:
    """(source, run) of kernel ``name(src, dst, long n)`` writing, contiguously, the ``shape``
    elements that ``access`` reads from ``src`` (a transpose or any strided view made dense);
    it runs ``size / run`` work-items."""
    n = shape_size(shape)
    run = _run_for(n, [access])
    return _kernel(name, ctype, [("in0", access, n)], n, run, lambda it, copy: "    " + copy("in0", "e")), run


def _kernel(name: str, ct: str, reads: list, n_out: int, run: int, body) -> str:
    """A layout kernel: ``reads`` are (parameter name, Access, elements) of its inputs; ``body(it,
    copy)`` writes its statements, ``copy(param, index)`` copying the run at output ``e``."""
    # 32-bit index arithmetic where every index fits: divisions by constants compile to half
    # the instructions (these kernels are bound by their index arithmetic, not by memory)
    span = max([n_out] + [_buffer_span(a, size) for _, a, size in reads])
    it = "uint" if span < 2 ** 31 else "ulong"
    access_of = {param: a for param, a, _ in reads}
    params = [f"__global const {ct}* restrict {param}" for param, _, _ in reads] + [f"__global {ct}* restrict out0"]

    def copy(param: str, index: str) -> str:
        src = f"{param}[{access_of[param].index(f'({index})')}"
        if run == 1:
            return f"out0[e] = {src}];"
        step = "" if access_of[param].kind == "scalar" else " + j"  # a broadcast scalar: one element
        return f"for ({it} j = 0; j < {run}; j++) out0[e + j] = {src}{step}];"

    return f"""
__kernel void {name}({', '.join(params)}, const long n) {{
    if (get_global_id(0) >= n) return;
    const {it} e = ({it})get_global_id(0) * {run};
{body(it, copy)}
}}"""


def _buffer_span(access: Access, size: int) -> int:
    """An upper bound of the buffer indices ``access`` produces for a value of ``size`` elements."""
    if access.kind == "general":
        return access.offset + sum((m - 1) * abs(st) for _, m, st in access.coeffs) + 1
    return access.offset + size


# body writers: (eqn, accesses, input names, element C type, index C type, copy) -> C statements

def _reshape_body(eqn, accesses: dict, names: dict, ct: str, it: str, copy) -> str:
    return "    " + copy(names[eqn.inputs[0]], "e")


def _pad_body(eqn, accesses: dict, names: dict, ct: str, it: str, copy) -> str:
    x, value = eqn.inputs
    oshape, ishape = eqn.out_vars[0].aval.shape, x.aval.shape
    ostrides, istrides = contiguous_strides(oshape), contiguous_strides(ishape)
    fill = _fill_literal(value.val, value.aval.dtype, ct) if type(value) is Literal else f"{names[value]}[{accesses[value].index('0')}]"
    lines, inside = [f"    {it} src = 0;"], []
    for d, ((lo, _, interior), size) in enumerate(zip(eqn.params["padding_config"], ishape)):
        if oshape[d] == 1 and size == 1 and lo == 0:
            continue  # coordinate 0 in both
        step = interior + 1
        # signed: coordinates left of the input are negative
        lines.append(f"    const int t{d} = (int)((e / {ostrides[d]}) % {oshape[d]}) - {lo};")
        cond = f"t{d} >= 0 && t{d} < {(size - 1) * step + 1 if size else 0}"
        if step > 1:
            cond += f" && t{d} % {step} == 0"
        inside.append(f"({cond})")
        lines.append(f"    src += (t{d} / {step}) * {istrides[d]};" if step > 1 else f"    src += t{d} * {istrides[d]};")
    test = " && ".join(inside) or "1"
    if shape_size(ishape) == 0:
        test = "0"
    lines.append(f"    if ({test}) {{ {copy(names[x], 'src')} }} else {{ out0[e] = {fill}; }}")
    return "\n".join(lines)


def _fill_literal(val, dtype, ct: str) -> str:
    """A padding value in C (float16: its bits)."""
    if ct == "ushort":
        return f"((ushort){int(np.asarray(val, np.float16).view(np.uint16))})"
    return c_literal(val, ct)


def _concatenate_body(eqn, accesses: dict, names: dict, ct: str, it: str, copy) -> str:
    axis = eqn.params["dimension"]
    shape = eqn.out_vars[0].aval.shape
    inner = shape_size(shape[axis + 1:])
    lines = [f"    const {it} inner = e % {inner}, c = (e / {inner}) % {shape[axis]}, outer = e / {inner * shape[axis]};"]
    start, branches = 0, []
    for v in eqn.inputs:
        length = v.aval.shape[axis]
        if length == 0:
            continue
        branches.append((start + length, copy(names[v], f"(outer * {length} + c - {start}) * {inner} + inner")))
        start += length
    for i, (end, stmt) in enumerate(branches):
        if i == len(branches) - 1:
            lines.append(f"    {'else ' if i else ''}{{ {stmt} }}")
        else:
            lines.append(f"    {'else ' if i else ''}if (c < {end}) {{ {stmt} }}")
    return "\n".join(lines)


class LayoutRule(NamedTuple):
    """How a layout kernel copies one primitive: ``body`` writes its statements; ``run(eqn)`` is
    the run of consecutive output elements that stay consecutive in its inputs (None: 1, no run)."""
    body: Callable
    run: Callable


LAYOUT_PRIMS.update({
    P.pad_p: LayoutRule(_pad_body, lambda eqn: None),
    P.concatenate_p: LayoutRule(_concatenate_body,
                                lambda eqn: shape_size(eqn.out_vars[0].aval.shape[eqn.params["dimension"] + 1:])),
    P.reshape_p: LayoutRule(_reshape_body, lambda eqn: shape_size(eqn.out_vars[0].aval.shape)),
})
