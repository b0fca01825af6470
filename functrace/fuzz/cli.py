"""The command line, ``python -m functrace.fuzz --n 5000 [--seed S] [--mode default|kernels]
[--extremes] [--dtypes float|all] [--against numpy|jax ...] [--minutes M] [--start I] [--program I]
[--sets K]``: runs a range of programs (or one, printing its source), prints each failure as it is
found and a summary at the end; exit status 1 when anything failed.
"""
from __future__ import annotations

import argparse
import faulthandler
import time

from .generator import generate
from .runner import Fuzzer

DESCRIPTION = ("Differential fuzzer: seeded random programs run by ``jit`` on OpenCL, ``jit`` on the numpy\n"
               "backend and eagerly, checked against a float64 reference with a per-element error bound.")


def main(argv=None) -> int:
    """Run the fuzzer as the command line asks; 1 when it found a failure."""
    parser = argparse.ArgumentParser(prog="python -m functrace.fuzz", description=DESCRIPTION)
    parser.add_argument("--n", type=int, default=200, help="number of programs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=("default", "kernels"), default="default",
                        help="kernels: every step runs as an OpenCL kernel (no host shortcuts)")
    parser.add_argument("--minutes", type=float, default=None, help="stop starting programs after this long")
    parser.add_argument("--start", type=int, default=0, help="first program index")
    parser.add_argument("--program", type=int, default=None, help="run only this program (prints its source)")
    parser.add_argument("--sets", type=int, default=2, help="input sets per program")
    parser.add_argument("--extremes", action="store_true",
                        help="inputs over the dtype's whole range (subnormals to near overflow, signed zeros, inf, "
                             "NaN), functions with delicate edge cases, and numpy itself compared too")
    parser.add_argument("--dtypes", choices=("float", "all"), default="float",
                        help="all: integer and bool programs too (int8 ... uint64, bool)")
    parser.add_argument("--against", action="append", choices=("numpy", "jax"), default=[],
                        help="also check what numpy itself or JAX (x64, when importable) computes; may be repeated")
    opts = parser.parse_args(argv)
    against = tuple(dict.fromkeys(opts.against))
    fuzzer = Fuzzer(opts.seed, opts.mode, opts.sets, log=lambda s: print(s, flush=True), extremes=opts.extremes,
                    dtypes=opts.dtypes, against=against)
    for note in fuzzer.stats.notes:
        print(note, flush=True)
    if opts.program is not None:
        prog = generate(opts.seed, opts.program, opts.extremes, opts.dtypes)
        print(f"# program {opts.program} (seed {opts.seed}), {prog.dtype.name}; inputs: {prog.describe_inputs()}")
        print(prog.source())
        indices = [opts.program]
    else:
        indices = range(opts.start, opts.start + opts.n)
    deadline = None if opts.minutes is None else time.monotonic() + 60 * opts.minutes
    t0 = time.monotonic()
    faulthandler.enable()  # a crash in a driver still says where

    def progress(i):
        # a program that hangs (a driver deadlock) ends the run with the stack, after 15 minutes
        faulthandler.dump_traceback_later(900, exit=True)
        if opts.program is None and (i - opts.start) % 50 == 0:
            print(f"[{time.monotonic() - t0:7.0f} s] program {i}: {len(fuzzer.stats.failures)} failures so far",
                  flush=True)
        return i
    try:
        stats = fuzzer.run((progress(i) for i in indices), deadline)
    except KeyboardInterrupt:  # Ctrl-C: the summary of the programs run so far
        stats = fuzzer.stats
        print("\ninterrupted", flush=True)
    faulthandler.cancel_dump_traceback_later()
    print(f"\nseed {opts.seed}, mode {opts.mode}{fuzzer.options()}, {time.monotonic() - t0:.0f} s")
    print(stats.summary())
    return 1 if stats.failures else 0
