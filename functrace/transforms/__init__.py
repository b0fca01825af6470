"""The transformations, IR to IR, written over the core and the basic primitives.

* ``staging``: tracing a Python function into a closed jaxpr (``make_jaxpr``).
* ``optimize``: the passes on the IR (constant folding, simplification, CSE, DCE, partial
  evaluation, merging collectives) and the analyses the backends read.
* ``autodiff`` (``jvp``, ``vjp``, ``grad``, ``jacfwd``, ``jacrev``, ``hessian``, ``linearize``),
  ``batching`` (``vmap``, axis names), ``custom`` (``custom_jvp``, ``custom_vjp``, ``checkpoint``),
  ``shapes`` (``eval_shape``), ``subprograms`` (the sub-programs of higher-order primitives) and
  ``jit`` (the cache of optimized programs, compiled by a backend).
"""
