"""Differential fuzzer: seeded random programs run by ``jit`` on OpenCL, ``jit`` on the numpy
backend and eagerly, checked against a float64 reference with a per-element error bound.

``python -m functrace.fuzz --n 5000 [--seed S] [--mode default|kernels] [--extremes] [--dtypes float|all]
[--against numpy|jax] [--minutes M]``

* ``programs``: a program (Python source over ``functrace.numpy``) and its input sets, from
  ``(seed, index)`` alone;
* ``generator``: the random program generator;
* ``bounds``: the reference, the program's IR interpreted in high precision with a bound on the
  error any correct implementation in the program's dtype may make;
* ``oracles``: the program run by numpy itself and by JAX (optional, imported on request);
* ``check``: one program on every backend and transformation, compared within those bounds;
* ``runner``: :class:`Fuzzer`, the loop over programs, shrinking and reporting failures;
* ``cli``: the command line.

docs/fuzzer.md describes what is generated and how the bounds are computed, the extremes mode,
integer and bool programs and the comparisons with numpy itself and JAX.
"""
from .bounds import Bound, BoundInterpreter
from .check import IMPLS, KINDS, Failure, compare, reference
from .cli import main
from .generator import generate
from .oracles import ORACLES
from .programs import InputSet, InputSpec, Program, Stmt, make_inputs
from .runner import Fuzzer, Stats

__all__ = ["Bound", "BoundInterpreter", "IMPLS", "KINDS", "ORACLES", "Failure", "Fuzzer", "InputSet", "InputSpec",
           "Program", "Stats", "Stmt", "compare", "generate", "main", "make_inputs", "reference"]
