"""Host step or kernel on a CPU device: the decisions of the cost estimate (``placement``), not
timings.  A fake runtime fixes the device (compute units, launch costs)."""
from types import SimpleNamespace

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import placement
from functrace.backends.opencl import runtime as cl_runtime
from functrace.backends.opencl.policy import make_policy

rt = cl_runtime.get_runtime()


def device(units: int, wait: float, dispatch: float = 3e-6):
    return SimpleNamespace(policy=make_policy("cpu"), device=SimpleNamespace(max_compute_units=units),
                           _launch_costs=placement.LaunchCosts(dispatch, wait))


PTHREAD = device(2, 70e-6)   # PoCL's pthread device on 2 cores: a launch and wait 30-110 us
BASIC = device(1, 2e-6)      # a driver running kernels in the calling thread


def chain(x):
    """21 operations, 7 of them transcendental (like issue 15's 14-operation chain)."""
    for _ in range(7):
        x = fnp.tanh(x * 1.01) + 0.1
    return x


def eqns_of(f, n):
    return ft.make_jaxpr(f)(np.zeros(n, np.float32)).jaxpr.eqns


@pytest.fixture(autouse=True)
def estimate(monkeypatch):
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", None)


def test_transcendental_chain_of_100k_is_a_kernel_one_add_is_not():
    assert len(eqns_of(chain, 10)) == 21  # mul, tanh, add per round
    assert not placement.host_is_cheaper(PTHREAD, eqns_of(chain, 100_000), 100_000)
    add = lambda n: eqns_of(lambda x: x + 1.0, n)
    assert placement.host_is_cheaper(PTHREAD, add(100_000), 100_000)            # under a launch's latency
    assert not placement.host_is_cheaper(PTHREAD, add(1_000_000), 1_000_000)    # enough work for two cores


def crossover(dev, f=lambda x: x + 1.0, after_kernel=False):
    """The smallest power of two of elements at which ``f`` becomes a kernel."""
    n = 1024
    while placement.host_is_cheaper(dev, eqns_of(f, n), n, after_kernel):
        n *= 2
    return n


def test_the_device_wait_moves_the_crossover():
    """An add becomes a kernel at ~1M elements on the pthread device after a host step (the
    kernel's launch pays the wait), from MIN_KERNEL_ELEMENTS after a kernel (the host step would
    wait for the queue instead); the chain on 30K elements is a kernel with a 10 us wait, on the host with a 70 us
    one; an in-thread driver keeps its element count (and batches the small steps)."""
    assert crossover(PTHREAD) == 1 << 20 and crossover(BASIC) == placement.IN_THREAD_ELEMENTS
    assert crossover(PTHREAD, after_kernel=True) == placement.MIN_KERNEL_ELEMENTS
    chain_30k = eqns_of(chain, 30_000)
    assert placement.host_is_cheaper(PTHREAD, chain_30k, 30_000)
    assert not placement.host_is_cheaper(device(2, 10e-6), chain_30k, 30_000)


def test_host_and_kernel_costs_are_separate_per_operation_and_width():
    """numpy's float32 tan is fast and PoCL's slow; tanh is the other way round on 100K elements;
    float64 sin costs numpy 10x its float32 (a kernel at a tenth of the elements)."""
    assert placement.host_is_cheaper(PTHREAD, eqns_of(fnp.tan, 100_000), 100_000)
    chain_of = lambda op: (lambda x: op(op(op(x * 0.9) * 0.9) * 0.9))
    assert not placement.host_is_cheaper(PTHREAD, eqns_of(chain_of(fnp.tanh), 300_000), 300_000)
    assert placement.host_is_cheaper(PTHREAD, eqns_of(chain_of(fnp.tan), 300_000), 300_000)
    f64 = lambda n: ft.make_jaxpr(chain_of(fnp.sin))(np.zeros(n, np.float64)).jaxpr.eqns
    assert not placement.host_is_cheaper(PTHREAD, f64(30_000), 30_000)
    assert placement.host_is_cheaper(PTHREAD, eqns_of(chain_of(fnp.sin), 30_000), 30_000)


def test_the_element_option_replaces_the_estimate(monkeypatch):
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 100)
    assert not placement.host_is_cheaper(PTHREAD, eqns_of(lambda x: x + 1.0, 200), 200)
    assert placement.host_is_cheaper(PTHREAD, eqns_of(chain, 99), 99)
    assert "opencl_host_step_elements" in placement.host_reason(PTHREAD, [], 99)
    assert not placement.host_is_cheaper(SimpleNamespace(policy=make_policy("gpu")), [], 1)  # the gpu kind: kernels


@pytest.mark.skipif(rt is None or rt.kind != "cpu", reason="describes the cpu kind's plans")
def test_the_planner_fuses_the_chain_and_leaves_one_add_on_the_host(monkeypatch):
    """Through ``jit``: the chain on 100K float32 is one kernel, no host step; a lone add on 20K
    elements beside it (so the program is not small) runs on the host when it comes first, with
    the estimate in the report, and as a kernel when it follows the chain's kernel."""
    monkeypatch.setattr(rt, "_launch_costs", PTHREAD._launch_costs, raising=False)
    x = np.linspace(-2, 2, 100_000, dtype=np.float32)
    f = ft.jit(chain, backend="opencl")
    exe = f.lower(x).compile().executable
    assert exe.num_host_steps == 0 and exe.num_kernel_launches == 1
    np.testing.assert_allclose(np.asarray(f(x)), ft.jit(chain, backend="numpy")(x), rtol=2e-6, atol=2e-6)
    y = np.linspace(0, 1, 20_000, dtype=np.float32)
    g = ft.jit(lambda x, y: (y + 1.0, chain(x)), backend="opencl")
    exe = g.lower(x, y).compile().executable
    assert exe.num_host_steps == 1 and "cheaper on the host: estimated" in exe.report()
    np.testing.assert_allclose(np.asarray(g(x, y)[0]), y + 1.0)
    after = ft.jit(lambda x, y: (chain(x), y + 1.0), backend="opencl")
    assert after.lower(x, y).compile().executable.num_kernel_launches == 2


@pytest.mark.skipif(rt is None, reason="no usable OpenCL device on this machine")
def test_launch_costs_are_measured_once_per_process(monkeypatch):
    monkeypatch.setattr(rt, "_launch_costs", None, raising=False)
    costs = placement.launch_costs(rt)
    assert 0 <= costs.dispatch < 0.01 and 0 < costs.dispatch + costs.wait < 0.05
    monkeypatch.setattr(placement, "_measure_launch", lambda rt: pytest.fail("measured again"))
    assert placement.launch_costs(rt) is costs


def _no_device_buffers(monkeypatch):
    """Make any device buffer or launch during the call fail the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a device buffer or launch in a program of host steps")
    monkeypatch.setattr(rt, "empty", refuse)
    monkeypatch.setattr(rt, "to_device", refuse)
    monkeypatch.setattr(rt, "buffer_for", refuse)


@pytest.mark.skipif(rt is None or rt.kind != "cpu", reason="describes the cpu kind's host plans")
def test_a_program_of_only_host_steps_makes_no_device_buffers(monkeypatch):
    """Cholesky and a triangular solve are LAPACK host steps: with every step on the host the
    program runs as the numpy backend would (same results), returning host-backed ft.Arrays,
    with no device buffer, copy or launch."""
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 10**9)  # the small steps too
    rng = np.random.default_rng(3)
    a = rng.standard_normal((37, 37))
    spd = a @ a.T / 37 + np.eye(37)
    f = lambda m: fnp.sum(fnp.linalg.cholesky(m) ** 2) * fnp.linalg.inv(m)
    jitted = ft.jit(f, backend="opencl")
    exe = jitted.lower(spd).compile().executable
    assert exe.num_kernel_launches == 0 and exe.num_host_steps >= 3, exe.report()
    assert "every step a host step" in exe.report() and "cholesky" in exe.report()
    _no_device_buffers(monkeypatch)
    out = jitted(spd)
    assert isinstance(out, cl_runtime.Array) and out._buffer is None
    np.testing.assert_array_equal(np.asarray(out), ft.jit(f, backend="numpy")(spd))
    np.testing.assert_array_equal(np.asarray(jitted(out)), ft.jit(f, backend="numpy")(np.asarray(out)))


@pytest.mark.skipif(rt is None, reason="no usable OpenCL device on this machine")
def test_an_input_only_host_steps_read_is_not_copied_to_the_device(monkeypatch):
    """A LAPACK step reads the matrix and a kernel the factor: the numpy argument is used in
    place (no device copy); an input a kernel also reads is still copied."""
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 0)  # the elementwise step: a kernel
    rng = np.random.default_rng(4)
    a = rng.standard_normal((33, 33))
    spd = a @ a.T / 33 + np.eye(33)
    b = rng.standard_normal(33)
    f = lambda m, b: fnp.linalg.cholesky(m) * 2.0 + b
    jitted = ft.jit(f, backend="opencl")
    exe = jitted.lower(spd, b).compile().executable
    assert exe.num_kernel_launches >= 1 and exe.num_host_steps == 1, exe.report()
    copied = []
    to_device = rt.to_device
    monkeypatch.setattr(rt, "to_device", lambda x: copied.append(np.shape(x)) or to_device(x))
    np.testing.assert_allclose(np.asarray(jitted(spd, b)), np.linalg.cholesky(spd) * 2.0 + b, rtol=1e-13)
    assert copied == [b.shape]


def _attention_eqn(batch, tokens):
    q = np.zeros((batch, tokens, 4, 32), np.float32)
    eqns = ft.make_jaxpr(lambda q: ft.nn.attention(q, q, q, causal=True))(q).jaxpr.eqns
    return next(e for e in eqns if e.primitive.name == "attention")


def test_small_attention_and_rms_norm_are_placed_on_the_host_large_ones_are_kernels():
    """Hand-written lowerings weighed by the estimate: attention by its logits (queries x keys per
    head), rms_norm by its elements.  One sequence of 64 tokens: host; 4 x 256 tokens: a kernel."""
    import functrace.backends.opencl.executable  # noqa: F401 (registers the lowerings)
    from functrace.backends.opencl.lowerings import SMALL_ON_HOST
    _touched = lambda e: SMALL_ON_HOST[e.primitive](e)  # noqa: E731
    small, large = _attention_eqn(1, 64), _attention_eqn(4, 256)
    assert _touched(small) == 4 * 64 * 64 and _touched(large) == 4 * 4 * 256 * 256
    assert placement.host_is_cheaper(PTHREAD, [small], _touched(small))
    assert not placement.host_is_cheaper(PTHREAD, [large], _touched(large))
    norm = lambda n: next(e for e in ft.make_jaxpr(lambda x: ft.nn.rms_norm(x, x[0]))(np.zeros((n, 128), np.float32)).jaxpr.eqns
                          if e.primitive.name == "rms_norm")
    assert placement.host_is_cheaper(PTHREAD, [norm(64)], _touched(norm(64)))
    assert not placement.host_is_cheaper(PTHREAD, [norm(8192)], _touched(norm(8192)))


@pytest.mark.skipif(rt is None or rt.kind != "cpu", reason="describes the cpu kind's host plans")
def test_a_program_of_host_steps_and_host_blas_matmuls_settles_on_the_host(monkeypatch):
    """Once every matmul is decided for the host BLAS (here: matmul='blas') and every other step
    is a host step, calls run as one numpy program: no device buffer or launch, same results."""
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 10**9)
    monkeypatch.setattr(ft.config, "matmul", "blas")
    rng = np.random.default_rng(5)
    w, x = rng.standard_normal((48, 40)).astype(np.float32), rng.standard_normal((9, 48)).astype(np.float32)
    f = lambda w, x: fnp.tanh(x @ w) * 2.0 + 1.0
    jitted = ft.jit(f, backend="opencl")
    exe = jitted.lower(w, x).compile().executable
    assert exe.num_kernel_launches == 0 and exe._on_host is None
    want = ft.jit(f, backend="numpy")(w, x)
    np.testing.assert_allclose(np.asarray(jitted(w, x)), want, rtol=1e-6)
    assert exe._on_host is not None and "run as one numpy program" in exe.report()
    dw = ft.device_put(w)
    _no_device_buffers(monkeypatch)
    out = jitted(dw, x)
    assert isinstance(out, cl_runtime.Array) and out._buffer is None
    np.testing.assert_array_equal(np.asarray(out), want)


@pytest.mark.skipif(rt is None or rt.kind != "cpu", reason="describes the cpu kind's plans")
def test_unmeasured_products_among_host_steps_settle_on_the_host_at_once(monkeypatch):
    """In auto mode, a program whose every other step runs on the host keeps its not yet measured
    products on the BLAS and runs as one numpy program from its first call: no measurement, no
    kernel warm-up.  A product alone (no host step) is still measured (test_opencl_matmul)."""
    from functrace.backends.opencl import matmul as mm
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 10**9)
    monkeypatch.setattr(ft.config, "matmul", "auto")
    for table in ("_DECISIONS", "_TIMINGS", "_RUNS", "_WARM", "_IN_FORCE"):
        monkeypatch.setattr(mm, table, {})
    monkeypatch.setattr(mm, "_load_decisions", lambda rt: None)  # (none from the disk cache either)
    rng = np.random.default_rng(6)
    w, x = rng.standard_normal((40, 56)).astype(np.float32), rng.standard_normal((11, 40)).astype(np.float32)
    f = lambda w, x: fnp.tanh(x @ w) * 2.0 + 1.0
    jitted = ft.jit(f, backend="opencl")
    want = ft.jit(f, backend="numpy")(w, x)
    for _ in range(mm.MEASURE_AT_RUN + 2):
        np.testing.assert_allclose(np.asarray(jitted(w, x)), want, rtol=1e-6)
    exe = jitted.lower(w, x).compile().executable
    assert exe._on_host is not None and exe.num_kernel_launches == 0
    assert "run as one numpy program" in exe.report()
    assert not mm._DECISIONS and not mm._WARM and not mm._RUNS


def test_a_long_chain_on_few_elements_stays_on_the_host():
    """Run time alone would make a 1,000-step chain on 4 elements one kernel (one launch beats
    6,000 numpy calls), but each kernel compiles at its first launch: below MIN_KERNEL_ELEMENTS a
    step stays on the host, with that reason."""
    def long_chain(x):
        for _ in range(300):
            x = fnp.sin(x) * 0.999 + 0.001
        return x
    eqns = eqns_of(long_chain, 4)
    assert placement.host_seconds(eqns) > 2 * placement.kernel_seconds(PTHREAD, eqns, 4)  # run time says kernel
    assert placement.host_is_cheaper(PTHREAD, eqns, 4)
    assert "first-launch compile" in placement.host_reason(PTHREAD, eqns, 4)
    assert not placement.host_is_cheaper(PTHREAD, eqns, placement.MIN_KERNEL_ELEMENTS)


def test_fused_groups_stop_growing_at_max_group_eqns(monkeypatch):
    """A kernel's compile time grows faster than its length: a 900-equation elementwise chain is
    split into kernels of at most MAX_GROUP_EQNS equations, and still computes the same."""
    from functrace.backends.opencl import planner
    monkeypatch.setattr(planner, "MAX_GROUP_EQNS", 100)
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 0)
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)

    def long_chain(x):
        for _ in range(300):
            x = x * 0.999 + 0.001
        return x
    x = np.linspace(0, 1, 2048, dtype=np.float32)
    compiled = ft.jit(long_chain).lower(x).compile()
    assert compiled.num_host_steps == 0 and 6 <= compiled.num_kernel_launches <= 8  # 600 equations
    np.testing.assert_allclose(np.asarray(compiled(x)), ft.jit(long_chain, backend="numpy")(x), rtol=1e-5)


@pytest.mark.skipif(rt is None or rt.kind != "cpu", reason="describes the cpu kind's plans")
def test_a_step_after_host_steps_pays_the_wait(monkeypatch):
    """A small group after a host step is not 'after a kernel' (a host step launches nothing):
    the MLP loss's 1280-element tail after its row max stays on the host (it became a chain of
    kernels when host steps counted as launches)."""
    monkeypatch.setattr(rt, "_launch_costs", PTHREAD._launch_costs, raising=False)
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)
    x = np.random.default_rng(3).standard_normal((128, 10)).astype(np.float32)
    f = lambda x: fnp.sum(fnp.exp(x - fnp.max(x, axis=1, keepdims=True)), axis=1)
    exe = ft.jit(f, backend="opencl").lower(x).compile().executable
    assert sum(s.launches for s in exe.plan.steps) == 0
