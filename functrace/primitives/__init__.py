"""Every primitive of functrace, by family, each declared once with all of its rules: its shape and
dtype rule (``abstract_eval``), numpy implementation (``impl``), derivatives (``jvp`` / ``vjp``, or
``jvp_rule`` / ``vjp_rule`` for a whole primitive), batching rule (``batch``) and the facts the
backends read (``core.Primitive`` lists them).  Derivative rules bind primitives only, so
derivatives nest to any depth.

* ``basic``: the primitives every other one is written with -- elementwise operations,
  reductions, shapes and layouts, ``dot_general``, gather / scatter-add, and the associative scans
  built on them.  One module, because their derivative rules use each other.  This package
  re-exports it: ``functrace.primitives.add_p`` is ``functrace.primitives.basic.add_p``.
* ``sorting`` (``argsort``) and ``scatter`` (``x.at[...]``'s set / mul / min / max): written
  with the basic primitives.
* ``control`` (``cond``, ``while``, ``scan``) and ``custom_calls`` (``custom_jvp_call``,
  ``custom_vjp_call``, ``checkpoint``): primitives holding sub-programs, whose rules transform
  those sub-programs (``subprograms`` stages and runs them); ``lax`` and ``custom`` bind them.
* ``nn`` (``rms_norm``, ``softmax``, ``log_softmax``, ``attention``, and the fused backwards
  ``rms_norm_bwd``, ``attention_bwd``) and ``convolution`` (``conv_general_dilated``): primitives
  the OpenCL backend runs as hand-written kernels; ``nn``'s other derivative and batching rules
  come from reference decompositions in ``functrace.numpy``, ``convolution``'s rules bind the
  convolution again.  ``functrace.nn`` and ``functrace.convolution`` (``ft.lax``) bind them.
* ``collectives`` (``psum``, ``pmax``, ``pmin``, ``all_gather``, ``psum_scatter``, ``ppermute``,
  ``all_to_all``, ``axis_index``): effectful primitives over a named axis -- a vmap's members,
  combined by each one's ``batch_named_axis`` rule, or the MPI processes, reached by its
  implementation; ``functrace.collectives`` (``ft.lax``) binds them.
* ``random_bits`` (``threefry2x32``, the hash of ``ft.random``'s bits), ``special`` (``erf``,
  ``erfc``, ``erf_inv``) and ``callbacks`` (``pure_callback``, ``debug_callback``: the user's
  Python function called on the host).
* ``linalg`` (``cholesky``, ``triangular_solve``, ``lu_factor`` / ``lu_solve``, ``det``,
  ``slogdet``, ``eigh``, ``eig``, ``svd``, ``qr``, ``lu``, ``lu_pivots_to_permutation``): host
  LAPACK (numpy.linalg, and ``lapack``'s direct calls into the OpenBLAS numpy ships) with
  derivative rules written with these primitives and ``functrace.numpy``; ``fft`` (numpy.fft's
  transforms, complex values, JAX's transposes).  ``functrace.numpy.linalg`` / ``fft`` and
  ``functrace.scipy.linalg`` bind them.

Backends key what they know of a primitive by the primitive object (``backends/``).
"""
from .basic import *  # noqa: F401,F403  (the basic primitives and the helpers rules are written with)
