"""``functrace.scipy.optimize``: ``minimize(fun, x0, method="BFGS")`` as ``jax.scipy.optimize``.

BFGS (Nocedal & Wright, *Numerical Optimization*, algorithm 6.1) keeps an estimate ``H`` of the
inverse Hessian, steps along ``-H g`` with a line search that satisfies the strong Wolfe
conditions (their algorithms 3.5 and 3.6: bracket, then zoom by safeguarded cubic interpolation),
and stops when the gradient's infinity norm is below ``gtol``.  Gradients come from
``ft.value_and_grad``, and both loops are ``ft.lax.while_loop``s over fixed-type states (every
branch is a ``fnp.where``), so the whole solve runs eagerly and inside ``ft.jit`` alike.

The line search is one loop whose every iteration evaluates one trial step: a phase flag says
whether it is still bracketing (doubling the step) or already zooming inside a bracket, so no
loop is nested in the line search.  Each trial point's gradient is kept (it is needed for the
curvature condition anyway), which gives the zoom a cubic with both end slopes.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from .. import numpy as fnp
from ..core.errors import check_callable, user_frame_description
from ..lax import while_loop
from ..transforms.autodiff import value_and_grad

__all__ = ["OptimizeResults", "minimize"]

_C1, _C2 = 1e-4, 0.9  # the Wolfe constants of quasi-Newton methods (sufficient decrease, curvature)
_ZOOM_MAXITER = 30


class OptimizeResults(NamedTuple):
    """What ``minimize`` found, as ``jax.scipy.optimize.OptimizeResults``.

    ``status``: 0 converged, 1 ``maxiter`` reached, 3 the line search's zoom failed, 4 the search
    direction was not a descent direction, 5 the line search ran out of iterations, -1 undefined.
    """

    x: Any
    success: Any
    status: Any
    fun: Any
    jac: Any
    hess_inv: Any
    nfev: Any
    njev: Any
    nit: Any


class _LineSearch(NamedTuple):
    """The line search's loop state along ``x + a p``: the next trial step ``a``, the previous
    trial (bracketing) or the bracket's ends ``lo`` / ``hi`` (zooming), and the accepted point."""

    done: Any
    failed: Any
    zooming: Any
    i: Any
    j: Any
    a: Any
    a_prev: Any
    f_prev: Any
    d_prev: Any
    g_prev: Any
    a_lo: Any
    f_lo: Any
    d_lo: Any
    g_lo: Any
    a_hi: Any
    f_hi: Any
    d_hi: Any
    a_star: Any
    f_star: Any
    g_star: Any


class _BFGS(NamedTuple):
    """BFGS's loop state: the iterate, its value and gradient, the inverse Hessian estimate."""

    converged: Any
    failed: Any
    k: Any
    nfev: Any
    ngev: Any
    x: Any
    f: Any
    g: Any
    H: Any
    f_old: Any
    ls_status: Any


def _pick(flag, new, old):
    """``new`` where ``flag`` is true, else ``old``, for every field of two like NamedTuples."""
    return type(old)(*(fnp.where(flag, n, o) for n, o in zip(new, old)))


def _cubic_step(a_lo, f_lo, d_lo, a_hi, f_hi, d_hi):
    """The minimizer of the cubic through both ends' values and slopes (Nocedal & Wright eq.
    3.59), or the midpoint where that is not well inside the bracket (the safeguard)."""
    width = a_hi - a_lo
    safe_width = fnp.where(width != 0, width, 1.0)
    d1 = d_lo + d_hi - 3 * (f_lo - f_hi) / (-safe_width)
    radicand = d1 * d1 - d_lo * d_hi
    d2 = fnp.sign(width) * fnp.sqrt(fnp.maximum(radicand, 0.0))
    denom = d_hi - d_lo + 2 * d2
    a_c = a_hi - width * (d_hi + d2 - d1) / fnp.where(denom != 0, denom, 1.0)
    lower, upper = fnp.minimum(a_lo, a_hi), fnp.maximum(a_lo, a_hi)
    margin = 0.1 * fnp.abs(width)
    usable = ((radicand >= 0) & (denom != 0) & fnp.isfinite(a_c) & fnp.isfinite(f_hi)
              & (a_c > lower + margin) & (a_c < upper - margin))
    return fnp.where(usable, a_c, 0.5 * (a_lo + a_hi))


def _line_search(vg: Callable, x, p, f0, g0, f_old, maxiter: int):
    """A step ``a`` along ``p`` satisfying the strong Wolfe conditions, starting from
    ``min(1, 2.02 (f0 - f_old) / f0')`` (Nocedal & Wright eq. 3.60).  Returns ``(failed, status,
    evaluations, a, f, g)``; a failed search returns its best sufficient-decrease point (maybe
    ``a = 0``).  Status: 0 found, 1 the zoom failed, 2 ``p`` is not a descent direction, 3
    ``maxiter`` bracketing steps."""
    dtype = x.dtype
    d0 = fnp.dot(g0, p)
    guess = 1.01 * 2 * (f0 - f_old) / fnp.where(d0 != 0, d0, -1.0)
    a0 = fnp.where((guess > 0) & fnp.isfinite(guess), fnp.minimum(guess, 1.0), 1.0)
    tiny = 1e-10 if np.finfo(dtype).bits >= 64 else 1e-5  # a bracket narrower than this has failed
    scalar = lambda v: fnp.asarray(v, dtype)
    zero, false = scalar(0.0), fnp.asarray(False)
    start = _LineSearch(done=false, failed=~(d0 < 0), zooming=false, i=np.int32(0), j=np.int32(0),
                        a=scalar(a0), a_prev=zero, f_prev=f0, d_prev=d0, g_prev=g0,
                        a_lo=zero, f_lo=f0, d_lo=d0, g_lo=g0, a_hi=zero, f_hi=f0, d_hi=d0,
                        a_star=zero, f_star=f0, g_star=g0)

    def body(s: _LineSearch) -> _LineSearch:
        f, g = vg(x + s.a * p)
        f = fnp.asarray(f, dtype)
        d = fnp.dot(g, p)
        decreases = f <= f0 + _C1 * s.a * d0  # (false for nan: a step into overflow is too long)
        curved = fnp.abs(d) <= -_C2 * d0
        # bracketing (algorithm 3.5): a bracket [prev, a] or [a, prev] holds a Wolfe point, a
        # Wolfe point is found, or the step doubles
        over = ~decreases | ((s.i > 0) & (f >= s.f_prev))
        found_b = ~over & curved
        turned = ~over & ~found_b & (d >= 0)
        # zooming (algorithm 3.6): a replaces hi, replaces lo, or lo becomes hi and a lo
        over_z = ~decreases | ~(f < s.f_lo)
        found_z = ~over_z & curved
        flip = ~over_z & ~found_z & (d * (s.a_hi - s.a_lo) >= 0)
        zoom, bracket = s.zooming, ~s.zooming
        found = (bracket & found_b) | (zoom & found_z)
        # the bracket's new ends: lo keeps the lower value and a sufficient decrease
        to_lo = (bracket & turned) | (zoom & ~over_z & ~found_z)
        from_prev = bracket & over
        a_lo = fnp.where(to_lo, s.a, fnp.where(from_prev, s.a_prev, s.a_lo))
        f_lo = fnp.where(to_lo, f, fnp.where(from_prev, s.f_prev, s.f_lo))
        d_lo = fnp.where(to_lo, d, fnp.where(from_prev, s.d_prev, s.d_lo))
        g_lo = fnp.where(to_lo, g, fnp.where(from_prev, s.g_prev, s.g_lo))
        hi_is_a = (bracket & over) | (zoom & over_z)
        hi_is_prev = bracket & turned
        hi_is_lo = zoom & flip
        a_hi = fnp.where(hi_is_a, s.a, fnp.where(hi_is_prev, s.a_prev, fnp.where(hi_is_lo, s.a_lo, s.a_hi)))
        f_hi = fnp.where(hi_is_a, f, fnp.where(hi_is_prev, s.f_prev, fnp.where(hi_is_lo, s.f_lo, s.f_hi)))
        d_hi = fnp.where(hi_is_a, d, fnp.where(hi_is_prev, s.d_prev, fnp.where(hi_is_lo, s.d_lo, s.d_hi)))
        zooming = zoom | over | turned
        extend = bracket & ~over & ~found_b & ~turned
        a_next = fnp.where(zooming, _cubic_step(a_lo, f_lo, d_lo, a_hi, f_hi, d_hi), 2 * s.a)
        i = s.i + np.int32(1)
        j = s.j + fnp.where(zooming, np.int32(1), np.int32(0))
        failed = ~found & ((zooming & ((fnp.abs(a_hi - a_lo) <= tiny) | (j >= _ZOOM_MAXITER)))
                           | (extend & (i >= maxiter)))
        a_prev = fnp.where(extend, s.a, s.a_prev)
        return _LineSearch(
            done=found, failed=failed, zooming=zooming, i=i, j=j, a=a_next,
            a_prev=a_prev, f_prev=fnp.where(extend, f, s.f_prev),
            d_prev=fnp.where(extend, d, s.d_prev), g_prev=fnp.where(extend, g, s.g_prev),
            a_lo=a_lo, f_lo=f_lo, d_lo=d_lo, g_lo=g_lo, a_hi=a_hi, f_hi=f_hi, d_hi=d_hi,
            # the accepted point; after a failure the best one seen: lo, or the last step of the doubling
            a_star=fnp.where(found, s.a, fnp.where(zooming, a_lo, a_prev)),
            f_star=fnp.where(found | extend, f, fnp.where(zooming, f_lo, s.f_prev)),
            g_star=fnp.where(found | extend, g, fnp.where(zooming, g_lo, s.g_prev)))

    end = while_loop(lambda s: ~s.done & ~s.failed, body, start)
    status = fnp.where(~(d0 < 0), np.int32(2),
                       fnp.where(end.failed & end.zooming, np.int32(1),
                                 fnp.where(end.failed, np.int32(3), np.int32(0))))
    return end.failed, status, end.i, end.a_star, end.f_star, end.g_star


def _norm(g, order):
    """``g``'s ``order``-norm (``inf``: the largest magnitude), the convergence measure."""
    if order == np.inf:
        return fnp.max(fnp.abs(g))
    return fnp.linalg.norm(g, ord=order)


def _bfgs(vg: Callable, x0, maxiter: int | None = None, norm: float = np.inf, gtol: float = 1e-5,
          line_search_maxiter: int = 10) -> tuple[_BFGS, int]:
    """BFGS from the flat ``x0`` with the inverse-Hessian update of Nocedal & Wright eq. 6.17;
    returns the final state and the iteration limit."""
    n = int(x0.shape[0])
    maxiter = 200 * n if maxiter is None else int(maxiter)
    dtype = x0.dtype
    f0, g0 = vg(x0)
    f0 = fnp.asarray(f0, dtype)
    eye = np.eye(n, dtype=dtype)
    start = _BFGS(converged=_norm(g0, norm) < gtol, failed=fnp.asarray(False), k=np.int32(0), nfev=np.int32(1),
                  ngev=np.int32(1), x=x0, f=f0, g=g0, H=fnp.asarray(eye), f_old=f0 + fnp.linalg.norm(g0) / 2,
                  ls_status=np.int32(0))

    def body(s: _BFGS) -> _BFGS:
        p = -fnp.matmul(s.H, s.g)
        failed, ls_status, evaluations, a, f, g = _line_search(vg, s.x, p, s.f, s.g, s.f_old, line_search_maxiter)
        step = a * p
        y = g - s.g
        sy = fnp.dot(step, y)
        rho = 1 / fnp.where(sy != 0, sy, 1.0)
        left = eye - rho * fnp.outer(step, y)
        H = fnp.matmul(fnp.matmul(left, s.H), fnp.transpose(left)) + rho * fnp.outer(step, step)
        H = fnp.where((sy != 0) & fnp.isfinite(rho), H, s.H)  # no curvature information: keep H
        return _BFGS(converged=_norm(g, norm) < gtol, failed=failed, k=s.k + np.int32(1),
                     nfev=s.nfev + evaluations, ngev=s.ngev + evaluations, x=s.x + step, f=f, g=g, H=H,
                     f_old=s.f, ls_status=ls_status)

    return while_loop(lambda s: ~s.converged & ~s.failed & (s.k < maxiter), body, start), maxiter


_METHODS = ("bfgs",)
_OPTIONS = ("maxiter", "norm", "gtol", "line_search_maxiter")


def minimize(fun: Callable, x0: Any, args: tuple = (), *, method: str = "BFGS", tol: float | None = None,
             options: Mapping[str, Any] | None = None) -> OptimizeResults:
    """Minimize ``fun(x, *args)`` (a scalar) from ``x0`` by BFGS, as
    ``jax.scipy.optimize.minimize``: gradients by autodiff, and it runs under ``ft.jit``.

    ``tol`` sets ``gtol`` (the gradient-norm tolerance, default 1e-5) as in scipy; ``options``:
    ``maxiter`` (default ``200 * x0.size``), ``gtol``, ``norm`` (default ``inf``) and
    ``line_search_maxiter`` (default 10).  ``x0`` of any shape is flattened for the solve (``x``
    and ``jac`` come back in its shape, ``hess_inv`` over the flat ``x``).  The result itself
    is not differentiable with respect to ``x0`` or ``args`` (its loops have no reverse-mode rule)."""
    check_callable(fun, "ft.scipy.optimize.minimize")
    if not isinstance(args, tuple):
        raise TypeError(f"ft.scipy.optimize.minimize: args must be a tuple, got {type(args).__name__} "
                        f"{user_frame_description()}")
    if not isinstance(method, str) or method.lower() not in _METHODS:
        raise ValueError(f"ft.scipy.optimize.minimize: method {method!r} is not provided: only 'BFGS' is provided "
                         f"(as in jax.scipy.optimize) {user_frame_description()}")
    options = dict(options or {})
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise TypeError(f"ft.scipy.optimize.minimize: unknown BFGS option(s) {unknown}; the options are "
                        f"{list(_OPTIONS)} {user_frame_description()}")
    if tol is not None:
        options.setdefault("gtol", tol)
    x0 = fnp.asarray(x0)
    shape = tuple(x0.shape)
    if not np.issubdtype(x0.dtype, np.floating):
        x0 = fnp.asarray(x0, np.float64)
    flat = lambda x: fun(fnp.reshape(x, shape), *args)
    vg = value_and_grad(flat)
    result, maxiter = _bfgs(vg, fnp.reshape(x0, (-1,)), **options)
    status = fnp.where(result.converged, np.int32(0),
                       fnp.where(result.k >= maxiter, np.int32(1),
                                 fnp.where(result.failed, np.int32(2) + result.ls_status, np.int32(-1))))
    return OptimizeResults(x=fnp.reshape(result.x, shape), success=result.converged & ~result.failed, status=status,
                           fun=result.f, jac=fnp.reshape(result.g, shape), hess_inv=result.H, nfev=result.nfev,
                           njev=result.ngev, nit=result.k)
