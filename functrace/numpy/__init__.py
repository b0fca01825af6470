"""``functrace.numpy``: the numpy API on traced values, written over the primitives.

Outside any transformation these functions compute eagerly with numpy and return numpy
arrays.  Broadcasting and dtype promotion follow numpy; Python scalars are *weakly typed*
(``float32_array * 2.0`` stays float32).
"""
# This package only re-exports: the core functions live in ``_base`` (which imports none of its
# siblings), the rest in submodules that import ``_base`` and each other, so no import is circular.
# The public names of the package are numpy's (``dir(functrace.numpy)`` lists the API).
import sys as _sys

# submodules: operators and methods on Tracer and EagerArray (installed at import), linalg and fft
from . import _base, _tracer_methods, fft, linalg
from ._base import *  # noqa: F403  (the core functions and numpy's constants: dtype, pi, inf, nan, newaxis, ...)
from ._base import __getattr__  # a numpy name functrace lacks raises NotInFunctrace, saying what to do

# creation helpers (functrace/numpy/_creation.py)
from ._creation import (
    c_,
    diag_indices,
    diag_indices_from,
    geomspace,
    index_exp,
    indices,
    ix_,
    logspace,
    meshgrid,
    mgrid,
    ogrid,
    r_,
    s_,
    tril,
    tril_indices,
    tril_indices_from,
    triu,
    triu_indices,
    triu_indices_from,
    vander,
)

# dtype helpers (functrace/numpy/_dtypes.py)
from ._dtypes import (
    can_cast,
    complexfloating,
    finfo,
    floating,
    generic,
    iinfo,
    inexact,
    integer,
    isdtype,
    issubdtype,
    number,
    promote_types,
    result_type,
    signedinteger,
    unsignedinteger,
)

# einsum (functrace/numpy/_einsum.py)
from ._einsum import einsum, einsum_path

# elementwise functions beyond the basic ufuncs (functrace/numpy/_elementwise.py)
from ._elementwise import (
    angle,
    cbrt,
    conj,
    conjugate,
    copysign,
    deg2rad,
    degrees,
    divmod,
    fabs,
    fix,
    float_power,
    fmod,
    frexp,
    heaviside,
    i0,
    imag,
    ldexp,
    modf,
    nan_to_num,
    rad2deg,
    radians,
    real,
    real_if_close,
    signbit,
    sinc,
    trunc,
)

# functions of functions (functrace/numpy/_functional.py)
from ._functional import apply_along_axis, apply_over_axes, fromfunction, piecewise, vectorize

# products and miscellaneous numerics (functrace/numpy/_misc.py)
from ._misc import (
    allclose,
    array_equal,
    array_equiv,
    bincount,
    choose,
    compress,
    convolve,
    corrcoef,
    correlate,
    cov,
    cross,
    diagflat,
    digitize,
    extract,
    fill_diagonal,
    gradient,
    histogram,
    histogram_bin_edges,
    interp,
    isclose,
    iscomplex,
    iscomplexobj,
    isin,
    isreal,
    isrealobj,
    isscalar,
    kron,
    matrix_transpose,
    matvec,
    polyfit,
    polyval,
    put,
    put_along_axis,
    resize,
    select,
    trapezoid,
    trim_zeros,
    unstack,
    vecdot,
    vecmat,
)

# scans and nan-reductions (functrace/numpy/_reductions.py)
from ._reductions import (
    count_nonzero,
    cumprod,
    cumulative_prod,
    nanargmax,
    nanargmin,
    nancumprod,
    nancumsum,
    nanmax,
    nanmean,
    nanmin,
    nanprod,
    nanstd,
    nansum,
    nanvar,
    ptp,
)

# shape and index helpers (functrace/numpy/_shape.py)
from ._shape import (
    append,
    array_split,
    atleast_1d,
    atleast_2d,
    atleast_3d,
    block,
    column_stack,
    delete,
    diff,
    dsplit,
    dstack,
    ediff1d,
    hsplit,
    insert,
    ravel_multi_index,
    roll,
    rollaxis,
    rot90,
    unravel_index,
    vsplit,
)

# sorting, quantiles, unique (functrace/numpy/_sorting.py)
from ._sorting import (
    argpartition,
    argsort,
    lexsort,
    median,
    nanmedian,
    nanpercentile,
    nanquantile,
    partition,
    percentile,
    quantile,
    searchsorted,
    sort,
    unique,
)

# numpy's protocols on tracers (np.sin(tracer), np.sum(tracer)) reach these names
_tracer_methods.route_numpy_protocols(_sys.modules[__name__])

# the modules this package is written in (_base, _shape, ...) are not numpy's names: dir(functrace.numpy)
# lists the API only
for _name in [name for name in globals() if name.startswith("_") and not name.startswith("__")]:
    del globals()[_name]
del _name
