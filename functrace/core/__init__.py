"""The IR and tracing, the bottom layer: nothing here imports the rest of functrace.

* ``ir``: abstract values, tracers and the trace stack with levels, the IR (``Jaxpr``, ``eval_jaxpr``,
  its printer) and ``Primitive`` with ``bind``.
* ``config`` (options, read from ``FUNCTRACE_*`` variables), ``errors`` (functrace's error types,
  messages that name the user's line, traceback filtering), ``eager`` (the array type eager calls
  return), ``reports`` (the HTML tables reports render).

The package re-exports ``ir``: ``functrace.core.Tracer`` is ``functrace.core.ir.Tracer``.
"""
from .ir import *  # noqa: F401,F403
