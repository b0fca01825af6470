"""Loops (issue 34): the programs of the issue's table, functrace ``jit`` at the defaults against JAX
jit (when installed), first call and steady state, ratios in the same run.

* an RK4 integrator of a damped pendulum, 200 steps in ``scan``, ``value_and_grad`` w.r.t. its 3
  parameters (float32): the program compiled whole (its forward scan, the reverse scan of its
  gradient and the glue between them as one work-group's kernel);
* the same integrator's forward under ``vmap`` over 1,000 initial conditions (float32): one lane loop
  (1,000 lanes spread over the device);
* a tanh RNN, T=50, H=16, ``value_and_grad`` of an MSE (float32): a matrix-vector product per step;
  the program compiled whole;
* the same RNN's per-sequence ``value_and_grad`` under ``vmap`` over 256 sequences: each scan a
  work-group per member (the cpu kind: a work-group per compute unit, each its members' rows);
* an unadjusted Langevin sampler, 1,000 steps of ``x + eps*grad(logp)(x) + sqrt(2 eps)*noise[i]`` in
  ``fori_loop``, 10-d standard normal (float32): a lane loop reading the noise table at the counter;
* Newton's method on 64 values (float64): in ``while_loop`` with the issue's max-reduction predicate,
  in ``fori_loop``, and as ``vmap`` of a scalar ``while_loop``: each program compiled whole;
* a moving average over 1,000 steps of a 256-vector in ``scan``, ``grad`` w.r.t. the rate
  (float32): the forward scan is a lane loop, and so is the reverse one, which sums the rate's
  cotangent over the lanes every step (held per lane, one more launch adds the lanes' totals).

At the defaults on PoCL the rows whose every launch is one work-group (all but the vmap over 1,000,
the vmap over 256 and the moving average) run on PoCL's in-thread ``basic`` device beside
``pthread`` (``backends/opencl/in_thread.py``); pinned, ``basic`` is the only device.

Each row: how functrace runs the program's loops (from the compile report), the first call (trace,
compile, run, on numpy inputs, before anything else of the row: the driver's disk cache warm after
the first run of the script; the first row's also pays the process's first OpenCL use), the
median of the steady-state calls on inputs put on the device (``device_put``: a loop passing its
state), and the same for JAX, the two contenders' calls timed in turns (``steady_medians``); values
checked equal first.
Run: ``python benchmarks/bench_loops.py`` (the defaults, then pinned to one thread: see _common.py).
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import call_times, median, setup  # noqa: E402

THREADS = setup()

import numpy as np

import functrace as ft
import functrace.numpy as fnp

CALLS = 50  # steady-state calls per program and contender (a program's median over these)
ROUNDS = 5  # ... timed in this many rounds, the contenders in turn (see steady_medians)


def programs(np_mod, lax, grad, value_and_grad, vmap):
    """The table's programs written once against a numpy-like module and its transformations:
    {name: (function, args, rtol)}."""
    def pendulum(params, theta0):
        g, c, a = params[0], params[1], params[2]
        dt = np.float32(0.01)

        def deriv(t, th, om):
            return om, -g * np_mod.sin(th) - c * om + a * np_mod.cos(t)

        def step(carry, _):
            t, th, om = carry
            k1 = deriv(t, th, om)
            k2 = deriv(t + dt / 2, th + dt / 2 * k1[0], om + dt / 2 * k1[1])
            k3 = deriv(t + dt / 2, th + dt / 2 * k2[0], om + dt / 2 * k2[1])
            k4 = deriv(t + dt, th + dt * k3[0], om + dt * k3[1])
            th = th + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
            om = om + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
            return (t + dt, th, om), th
        return lax.scan(step, (theta0 * 0, theta0, theta0 * 0), None, length=200)[1]

    def rnn_loss(w, u, xs, target):
        h = lax.scan(lambda h, x: (np_mod.tanh(w @ h + u * x), None), np_mod.zeros(16, np.float32), xs)[0]
        return np_mod.mean((h - target) ** 2)

    def rnn_batch_loss(w, u, xs, targets):  # per-sequence gradients of a batch: a work-group per member
        return vmap(value_and_grad(rnn_loss), in_axes=(None, None, 0, 0))(w, u, xs, targets)

    def langevin(x0, noise):
        eps = np.float32(0.01)
        grad_logp = grad(lambda x: -0.5 * np_mod.sum(x * x))
        return lax.fori_loop(0, 1000, lambda i, x: x + eps * grad_logp(x) + np.float32(np.sqrt(2 * 0.01)) * noise[i],
                             x0)

    def newton_while(a):
        def cond(c):
            return (np_mod.max(np_mod.abs(c[0] * c[0] - a)) > 1e-12) & (c[1] < 100)
        return lax.while_loop(cond, lambda c: (c[0] - (c[0] * c[0] - a) / (2.0 * c[0]), c[1] + 1), (a + 1.0, 0))[0]

    def newton_fori(a):
        return lax.fori_loop(0, 30, lambda i, x: x - (x * x - a) / (2.0 * x), a + 1.0)

    def newton_scalar(a):
        return lax.while_loop(lambda x: np_mod.abs(x * x - a) > 1e-12 * a, lambda x: x - (x * x - a) / (2.0 * x),
                              a + 1.0)

    def moving_average_loss(rate, xs):
        def step(m, x):
            m = (1 - rate) * m + rate * x
            return m, m
        return np_mod.mean(lax.scan(step, xs[0], xs)[1] ** 2)

    rng = np.random.default_rng(0)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    params, theta0 = np.array([9.8, 0.3, 0.5], np.float32), np.float32(0.7)
    pendulum_loss = lambda p, t0: np_mod.mean(pendulum(p, t0) ** 2)
    a = rng.uniform(0.5, 100.0, 64)
    return {
        "RK4 pendulum, 200 steps, value_and_grad (f32)": (value_and_grad(pendulum_loss), (params, theta0), 1e-4),
        "RK4 pendulum forward, vmap over 1,000 (f32)": (vmap(pendulum, in_axes=(None, 0)),
                                                         (params, rng.uniform(-1, 1, 1000).astype(np.float32)), 1e-4),
        "tanh RNN T=50 H=16, value_and_grad (f32)": (value_and_grad(rnn_loss), (f32(16, 16) * 0.3, f32(16), f32(50),
                                                                                  f32(16)), 1e-4),
        "tanh RNN, per-sequence value_and_grad, vmap over 256 (f32)": (rnn_batch_loss, (
            f32(16, 16) * 0.3, f32(16), f32(256, 50), f32(256, 16)), 1e-4),
        "Langevin, 1,000 steps in fori_loop, 10-d (f32)": (langevin, (f32(10), f32(1000, 10)), 1e-4),
        "Newton, while_loop, max-reduction predicate, 64 (f64)": (newton_while, (a,), 1e-12),
        "Newton, fori_loop, 30 steps, 64 (f64)": (newton_fori, (a,), 1e-12),
        "Newton, vmap of a scalar while_loop, 64 (f64)": (vmap(newton_scalar), (a,), 1e-12),
        "moving average, 1,000 x 256 scan, grad w.r.t. the rate (f32)": (grad(moving_average_loss),
                                                                        (np.float32(0.1), f32(1000, 256)), 1e-3),
    }


def loops_line(compiled) -> str:
    """How the compiled program runs its loops, from its report: per loop, whole or not and why."""
    out = []
    for line in compiled.report().splitlines():
        words = line.split()
        if len(words) > 1 and words[1] == "program:":  # a program compiled whole, its loops inside
            out.append(f"program whole ({line.rsplit(', ', 1)[1].rstrip(')')}, one work-group)")
        elif len(words) > 1 and words[1].rstrip(":") in ("scan", "while"):
            if "compiled whole:" in line and "not compiled whole" not in line:
                how = " (a work-group per member)" if "running its rows" in line else \
                    " (one work-group)" if "one work-group" in line else " (lane loop)"
                out.append(f"{words[1].rstrip(':')} whole{how}")
            else:
                why = line.split("not compiled whole: ")[-1].rstrip(")") if "not compiled whole" in line else "?"
                out.append(f"{words[1].rstrip(':')} not whole ({why})")
    return "; ".join(out)


def first_call(make, args, block, put):
    """(seconds of the first call of a freshly made jitted function on the host arrays ``args``,
    a steady-state call on them put on the device, as a loop passes its state)."""
    fn = make()
    t0 = time.perf_counter()
    block(fn(*args))
    first = time.perf_counter() - t0
    args = put(args)
    return first, lambda: block(fn(*args))


def steady_medians(calls: list) -> list:
    """The median seconds of each steady-state call in ``calls``, interleaved: ``ROUNDS`` rounds of
    ``CALLS // ROUNDS`` timed calls of each in turn (after 2 untimed), so that what one contender
    leaves behind (JAX's spinning thread pool, PoCL's workers) weighs on each the same."""
    times: list = [[] for _ in calls]
    for _ in range(ROUNDS):
        for k, call in enumerate(calls):
            times[k] += call_times(call, repeat=CALLS // ROUNDS, warmup=2)
    return [median(t) for t in times]


def main():
    ft_programs = programs(fnp, ft.lax, ft.grad, ft.value_and_grad, ft.vmap)
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)  # (float32 programs stay float32: their inputs are)
        jax_programs = programs(jnp, jax.lax, jax.grad, jax.value_and_grad, jax.vmap)
        jax_block = lambda out: jax.block_until_ready(out)
        jax_name = f"JAX {jax.__version__} jit"
    except ImportError:
        jax_programs, jax_name = {}, "JAX (not installed)"
    print(f"loops (issue 34), functrace jit at the defaults vs {jax_name}, {THREADS} thread(s); "
          f"ms, steady state = median of {CALLS} calls\n")
    print("| program | functrace's loops | functrace first call | functrace steady | JAX first call | JAX steady "
          "| steady ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, (f, args, rtol) in ft_programs.items():
        ft_first, ft_call = first_call(lambda f=f: ft.jit(f), args, ft.block_until_ready, ft.device_put)
        compiled = ft.jit(f).lower(*args).compile()  # (after the first call: its program is built by then)
        want = [np.asarray(x) for x in ft.tree_util.tree_leaves(ft.jit(f, backend="numpy")(*args))]
        got = [np.asarray(x) for x in ft.tree_util.tree_leaves(ft.jit(f)(*args))]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
        if name in jax_programs:
            jf, jargs, _ = jax_programs[name]
            j_first, j_call = first_call(lambda jf=jf: jax.jit(jf), jargs, jax_block, jax.device_put)
            for g, w in zip(got, [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(jf)(*jargs))]):
                np.testing.assert_allclose(g, w, rtol=rtol * 10, atol=rtol * 10)
            ft_steady, j_steady = steady_medians([ft_call, j_call])
            row = f"| {name} | {loops_line(compiled)} | {ft_first * 1e3:.1f} | {ft_steady * 1e3:.3f} |"
            row += f" {j_first * 1e3:.1f} | {j_steady * 1e3:.3f} | {ft_steady / j_steady:.2f}x |"
        else:
            [ft_steady] = steady_medians([ft_call])
            row = f"| {name} | {loops_line(compiled)} | {ft_first * 1e3:.1f} | {ft_steady * 1e3:.3f} | - | - | - |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
