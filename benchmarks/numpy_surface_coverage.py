"""How much of jax.numpy's most used surface functrace.numpy covers (issue 16's target: of 150
names, >= 145 present and matching).

For each name: present in ``functrace.numpy``; matches numpy eagerly; matches under ``jit`` on
the numpy backend and on OpenCL (when a device exists); and, for differentiable float functions
with JAX installed, ``grad`` of the sum of the result matches ``jax.grad``.  The list of names is
our estimate of the 150 most used in JAX code (creation, elementwise, reductions, shapes,
indexing, linear algebra entry points, dtypes), not a measured ranking.
With autograd installed it also counts the numpy, numpy.linalg and numpy.fft functions autograd
differentiates (those of its registered primitives that numpy itself has; its internal helpers
are left out) that ``functrace.numpy`` provides.
Run: ``python benchmarks/numpy_surface_coverage.py [-v]``.
"""
from __future__ import annotations

import sys
import warnings

import numpy as np

import functrace as ft
import functrace.numpy as fnp

RNG = np.random.default_rng(0)
X = RNG.uniform(0.2, 0.9, (3, 4))        # a safe domain for log, sqrt, arcsin, ...
Y = RNG.uniform(0.2, 0.9, (3, 4))
V = RNG.uniform(0.2, 0.9, 5)
SQ = RNG.uniform(0.2, 0.9, (4, 4)) + 4 * np.eye(4)
I = np.array([2, 0, 1, 1])

# name -> (call(module, *args), args, differentiable); module is fnp, numpy or jax.numpy
U = lambda name: (lambda m, x: getattr(m, name)(x), (X,), True)  # noqa: E731
B = lambda name: (lambda m, x, y: getattr(m, name)(x, y), (X, Y), True)  # noqa: E731
R = lambda name: (lambda m, x: getattr(m, name)(x, axis=1), (X,), True)  # noqa: E731
N = lambda name: (lambda m, x: getattr(m, name)(x), (X,), False)  # noqa: E731
C = lambda f, *args, d=True: (f, args, d)  # noqa: E731

SPECS = {
    **{n: U(n) for n in ["abs", "absolute", "exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "log1p", "expm1",
                         "square", "negative", "reciprocal", "arcsin", "arccos", "arctan", "sinh", "cosh", "log2",
                         "log10", "exp2", "cbrt", "deg2rad", "rad2deg", "sinc", "arcsinh", "arctanh", "ravel",
                         "transpose", "fliplr", "flipud", "atleast_1d", "atleast_2d", "atleast_3d", "tril", "triu",
                         "cumsum", "diff", "rot90", "trapezoid", "cov", "corrcoef", "diagonal", "trace",
                         "real", "conj", "nan_to_num", "i0", "positive"]},
    **{n: B(n) for n in ["add", "subtract", "multiply", "divide", "true_divide", "maximum", "minimum", "power",
                         "arctan2", "logaddexp", "hypot", "fmod", "copysign", "float_power", "logaddexp2", "mod",
                         "remainder", "outer", "kron", "vdot", "inner", "fmax", "fmin"]},
    **{n: R(n) for n in ["sum", "mean", "max", "min", "prod", "std", "var", "amax", "amin", "average",
                         "cumprod", "median", "nansum", "nanmean", "nanmax", "nanmin", "ptp", "sort"]},
    **{n: N(n) for n in ["sign", "floor", "ceil", "round", "rint", "trunc", "isnan", "isfinite", "isinf", "signbit",
                         "argmax", "argmin", "argsort", "shape", "ndim", "size", "zeros_like", "ones_like",
                         "logical_not", "count_nonzero", "nonzero", "argwhere", "unique", "flatnonzero"]},
    **{n: (lambda m, x, y, n=n: getattr(m, n)(x > 0.5, y > 0.5), (X, Y), False)
       for n in ["logical_and", "logical_or", "logical_xor"]},
    **{n: (lambda m, x, y, n=n: getattr(m, n)(x, y), (X, Y), False)
       for n in ["equal", "not_equal", "less", "greater", "less_equal", "greater_equal", "isclose", "allclose",
                 "array_equal", "floor_divide"]},
    "array": C(lambda m, x: m.array(x) * 2, X), "asarray": C(lambda m, x: m.asarray(x) * 2, X),
    "zeros": C(lambda m: m.zeros((2, 3)), d=False), "ones": C(lambda m: m.ones((2, 3)), d=False),
    "full": C(lambda m, x: m.full((2, 3), x[0, 0]), X), "full_like": C(lambda m, x: m.full_like(x, 2.0), X, d=False),
    "empty": C(lambda m: m.empty((2, 3)) * 0, d=False), "eye": C(lambda m: m.eye(3), d=False),
    "identity": C(lambda m: m.identity(3), d=False), "arange": C(lambda m: m.arange(5), d=False),
    "linspace": C(lambda m, x: m.linspace(x[0, 0], x[0, 1], 5), X), "logspace": C(lambda m, x: m.logspace(x[0, 0], 1.0, 4), X),
    "geomspace": C(lambda m, x: m.geomspace(x[0, 0], 2.0, 4), X),
    "meshgrid": C(lambda m, v: m.meshgrid(v, v[:3])[0], V), "tri": C(lambda m: m.tri(3), d=False),
    "stack": C(lambda m, x, y: m.stack([x, y], 1), X, Y), "concatenate": C(lambda m, x, y: m.concatenate([x, y]), X, Y),
    "hstack": C(lambda m, x, y: m.hstack([x, y]), X, Y), "vstack": C(lambda m, x, y: m.vstack([x, y]), X, Y),
    "column_stack": C(lambda m, v: m.column_stack([v, v]), V), "dstack": C(lambda m, x, y: m.dstack([x, y]), X, Y),
    "block": C(lambda m, x, y: m.block([[x, y]]), X, Y), "append": C(lambda m, x: m.append(x, x), X),
    "reshape": C(lambda m, x: m.reshape(x, (4, 3)), X), "swapaxes": C(lambda m, x: m.swapaxes(x, 0, 1), X),
    "moveaxis": C(lambda m, x: m.moveaxis(x, 0, 1), X), "expand_dims": C(lambda m, x: m.expand_dims(x, 1), X),
    "squeeze": C(lambda m, x: m.squeeze(x[:1]), X), "broadcast_to": C(lambda m, v: m.broadcast_to(v, (2, 5)), V),
    "where": C(lambda m, x, y: m.where(x > y, x, y), X, Y), "clip": C(lambda m, x: m.clip(x, 0.3, 0.7), X),
    "split": C(lambda m, x: m.split(x, 2, 1)[1], X), "array_split": C(lambda m, x: m.array_split(x, [1, 3], 1)[1], X),
    "tile": C(lambda m, x: m.tile(x, (2, 1)), X), "repeat": C(lambda m, x: m.repeat(x, 2, 0), X),
    "pad": C(lambda m, x: m.pad(x, 2, mode="reflect"), X), "flip": C(lambda m, x: m.flip(x, 1), X),
    "roll": C(lambda m, x: m.roll(x, 2, 1), X), "diag": C(lambda m, v: m.diag(v), V),
    "take": C(lambda m, x: m.take(x, I, 1), X), "take_along_axis": C(lambda m, x: m.take_along_axis(x, I[None, :], 0), X),
    "insert": C(lambda m, x: m.insert(x, 1, 5.0, axis=1), X), "delete": C(lambda m, x: m.delete(x, 1, axis=1), X),
    "dot": C(lambda m, x, y: m.dot(x, y.T), X, Y), "matmul": C(lambda m, x, y: m.matmul(x, y.T), X, Y),
    "einsum": C(lambda m, x, y: m.einsum("ij,kj->ik", x, y), X, Y), "tensordot": C(lambda m, x, y: m.tensordot(x, y, 2), X, Y),
    "cross": C(lambda m, x, y: m.cross(x[:, :3], y[:, :3]), X, Y), "interp": C(lambda m, v: m.interp(v, np.array([0.0, 0.5, 1.0]), np.array([1.0, 3.0, 2.0])), V),
    "convolve": C(lambda m, v: m.convolve(v, v[:3]), V), "correlate": C(lambda m, v: m.correlate(v, v[:3], "same"), V),
    "gradient": C(lambda m, x: m.gradient(x, axis=1), X),
    "polyval": C(lambda m, v: m.polyval(v[:3], v), V), "select": C(lambda m, x: m.select([x > 0.5], [x * 2], x), X),
    "searchsorted": C(lambda m, v: m.searchsorted(np.array([0.3, 0.6]), v), V, d=False),
    "digitize": C(lambda m, v: m.digitize(v, np.array([0.3, 0.6])), V, d=False),
    "bincount": C(lambda m: m.bincount(I, minlength=4), d=False),
    "quantile": C(lambda m, x: m.quantile(x, 0.3, axis=1), X), "percentile": C(lambda m, x: m.percentile(x, 30.0), X),
    "histogram": C(lambda m, v: m.histogram(v, 3)[0], V, d=False),
    "float32": C(lambda m, x: m.float32(x) * 2, X), "int32": C(lambda m, x: m.int32(x * 10), X, d=False),
    "finfo": C(lambda m: m.zeros(1) + m.finfo(m.float32).eps, d=False),
    "iinfo": C(lambda m: m.zeros(1) + m.iinfo(m.int32).max, d=False),
    "result_type": C(lambda m, x: m.zeros(1, m.result_type(x, 1)), X, d=False),
    "promote_types": C(lambda m: m.zeros(1, m.promote_types(np.int8, np.uint8)), d=False),
    "issubdtype": C(lambda m, x: m.zeros(1) + m.issubdtype(x.dtype, m.floating), X, d=False),
    "unravel_index": C(lambda m: m.stack(m.unravel_index(I, (2, 3))), d=False),
    "tril_indices": C(lambda m, x: x[m.tril_indices(3)], X), "triu_indices": C(lambda m, x: x[m.triu_indices(3, 1)], X),
    "ix_": C(lambda m, x: x[m.ix_(np.array([0, 2]), np.array([1, 3]))], X),
    "linalg.norm": C(lambda m, x: m.linalg.norm(x), X), "linalg.inv": C(lambda m, s: m.linalg.inv(s), SQ),
    "linalg.solve": C(lambda m, s, v: m.linalg.solve(s, v[:4]), SQ, V), "linalg.det": C(lambda m, s: m.linalg.det(s), SQ),
    "linalg.cholesky": C(lambda m, s: m.linalg.cholesky(s @ s.T), SQ), "linalg.eigh": C(lambda m, s: m.linalg.eigh(s + s.T)[0], SQ),
    "linalg.svd": C(lambda m, s: m.linalg.svd(s, compute_uv=False), SQ), "linalg.slogdet": C(lambda m, s: m.linalg.slogdet(s)[1], SQ),
    "vectorize": C(lambda m, x: m.vectorize(lambda u, v: (u * v).sum(), signature="(n),(n)->()")(x, x[0]), X),
    "apply_along_axis": C(lambda m, x: m.apply_along_axis(lambda v: v * v.sum(), 1, x), X),
    "piecewise": C(lambda m, v: m.piecewise(v, [v < 0.5], [lambda t: t * 2, lambda t: t ** 2]), V),
    "isin": C(lambda m: m.isin(I, np.array([1, 2])), d=False), "copy": C(lambda m, x: m.copy(x) * 2, X),
    "fill_diagonal": C(lambda m, s: m.fill_diagonal(s, 1.0, inplace=False) if m is not np else
                       (lambda c: (np.fill_diagonal(c, 1.0), c)[1])(s.copy()), SQ),
    "fft.fft": C(lambda m, v: m.abs(m.fft.fft(v)), V), "fft.rfft": C(lambda m, v: m.abs(m.fft.rfft(v)), V),
}


# value-dependent output shapes: concrete values only, under jit in JAX as here (without size=)
CONCRETE_ONLY = {"argwhere", "flatnonzero", "histogram", "nonzero", "unique"}


def _resolve(module, name):
    obj = module
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _same(a, b) -> bool:
    la, lb = ft.tree_util.tree_leaves(a), ft.tree_util.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or not np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True):
            return False
    return True


def check(name: str, opencl: bool, jax_numpy) -> dict:
    """Each check's verdict for ``name``: True, False or None (not applicable)."""
    f, args, differentiable = SPECS[name]
    out = {"present": True, "eager": False, "jit_numpy": False, "jit_opencl": None, "grad": None}
    try:
        _resolve(fnp, name)
    except AttributeError:
        out["present"] = False
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = f(np, *args)
        run = lambda g: g(*args)  # noqa: E731
        runs = [("eager", lambda *a: f(fnp, *a))]
        if name in CONCRETE_ONLY:
            out["jit_numpy"] = None
        else:
            runs.append(("jit_numpy", ft.jit(lambda *a: f(fnp, *a), backend="numpy")))
            if opencl:
                runs.append(("jit_opencl", ft.jit(lambda *a: f(fnp, *a), backend="opencl")))
        for key, fn in runs:
            try:
                out[key] = _same(run(fn), want)
            except Exception as e:  # noqa: BLE001  (a failure is a verdict here)
                out[key] = False
                out[key + "_error"] = f"{type(e).__name__}: {e}"[:120]
        if differentiable and args and jax_numpy is not None:
            import jax
            try:
                mine = ft.grad(lambda *a: fnp.sum(f(fnp, *a)))(*args)
                theirs = jax.grad(lambda *a: jax_numpy.sum(f(jax_numpy, *a)))(*args)
                out["grad"] = _same(mine, theirs)
            except Exception as e:  # noqa: BLE001
                out["grad"] = False
                out["grad_error"] = f"{type(e).__name__}: {e}"[:120]
    return out


def main() -> None:
    verbose = "-v" in sys.argv
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
    except ImportError:
        jnp = None
    from functrace.backends.opencl import runtime
    opencl = runtime.get_runtime() is not None
    names = sorted(SPECS)
    results = {n: check(n, opencl, jnp) for n in names}
    present = [n for n in names if results[n]["present"]]
    ok = [n for n in present if all(v is not False for k, v in results[n].items() if not k.endswith("_error"))]
    print(f"{len(names)} names checked; present {len(present)}; present and matching (eager, jit numpy"
          f"{', jit OpenCL' if opencl else ''}{', grad vs JAX' if jnp is not None else ''}) {len(ok)}")
    print("missing:", " ".join(n for n in names if not results[n]["present"]) or "-")
    print("present but not matching:")
    for n in present:
        if n not in ok:
            r = results[n]
            fails = [k for k, v in r.items() if v is False]
            print(f"  {n}: {', '.join(fails)}" + ("".join(f"\n      {r[k]}" for k in r if k.endswith('_error'))
                                                   if verbose else ""))


def _has(module, name: str) -> bool:
    try:
        _resolve(module, name)
    except AttributeError:
        return False
    return True


def autograd_coverage() -> None:
    """The numpy functions autograd registers derivatives for, and which of them fnp lacks."""
    try:
        import autograd.numpy.fft  # noqa: F401  (registers its primitives)
        import autograd.numpy.linalg  # noqa: F401
        from autograd.core import primitive_vjps
    except ImportError:
        print("autograd not installed: its coverage is not counted")
        return
    names = set()
    for prim in primitive_vjps:
        fn = getattr(prim, "fun", prim)
        module, name = getattr(fn, "__module__", "") or "", getattr(fn, "__name__", None)
        prefix = "linalg." if "linalg" in module else "fft." if "fft" in module else ""
        if name is not None and _has(np, prefix + name):  # numpy's own functions only
            names.add(prefix + name)
    missing = sorted(n for n in names if not _has(fnp, n))
    print(f"autograd differentiates {len(names)} numpy / linalg / fft functions; functrace.numpy has "
          f"{len(names) - len(missing)}; missing: {' '.join(missing) or '-'}")


if __name__ == "__main__":
    main()
    autograd_coverage()
