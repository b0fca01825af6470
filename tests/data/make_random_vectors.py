"""Regenerate tests/data/random_vectors.npz: jax.random / jax.nn.initializers outputs that
tests/test_random.py checks ft.random against without JAX.  Run from the repository root with
JAX installed: ``python tests/data/make_random_vectors.py`` (JAX 0.10.2 made the stored file;
float32 cases without x64, float64 cases in a second process with jax_enable_x64)."""
import subprocess
import sys

import numpy as np

SEEDS = (0, 1, 42, 2 ** 31 - 1, 123456789)
P5 = np.array([0.1, 0.2, 0.3, 0.15, 0.25], np.float32)
COV = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.5]])
COV_BATCH = np.stack([COV, 2 * COV + np.eye(3)]).astype(np.float32)


def cases(random, initializers) -> dict:
    """name -> a call with a key, the same for ``jax.random`` / ``jax.nn.initializers`` (to store
    the vectors) and ``ft.random`` / ``ft.nn.initializers`` (to check them: tests/test_random.py);
    the names starting with ``x64_`` are made by JAX with x64."""
    return {
        "key": lambda k: k,
        "split3": lambda k: random.split(k, 3),
        "split2x2": lambda k: random.split(k, (2, 2)),
        "fold_in7": lambda k: random.fold_in(k, 7),
        "fold_in_max": lambda k: random.fold_in(k, 2 ** 32 - 1),
        "bits": lambda k: random.bits(k, (4, 5)),
        "uniform": lambda k: random.uniform(k, (3, 7)),
        "uniform_range": lambda k: random.uniform(k, (9,), minval=-2.0, maxval=3.0),
        "normal": lambda k: random.normal(k, (64,)),
        "truncated_normal": lambda k: random.truncated_normal(k, -1.5, 2.0, (16,)),
        "bernoulli": lambda k: random.bernoulli(k, 0.3, (20,)),
        "bernoulli_keep": lambda k: random.bernoulli(k, 0.75, (6, 8)),
        "categorical": lambda k: random.categorical(k, np.log(np.linspace(0.1, 1.0, 15, dtype=np.float32)).reshape(3, 5)),
        "categorical_shape": lambda k: random.categorical(k, np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5),
                                                          axis=0, shape=(4, 5)),
        "categorical_noreplace": lambda k: random.categorical(k, np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5),
                                                              shape=(2, 3), replace=False),
        "randint": lambda k: random.randint(k, (10,), -5, 17),
        "randint_wide": lambda k: random.randint(k, (6,), -(2 ** 31), 2 ** 31 - 1),
        "randint_int8": lambda k: random.randint(k, (6,), -100, 120, np.int8),
        "permutation": lambda k: random.permutation(k, 20),
        "permutation_rows": lambda k: random.permutation(k, np.arange(18.0, dtype=np.float32).reshape(6, 3)),
        "permutation_independent": lambda k: random.permutation(k, np.arange(18.0, dtype=np.float32).reshape(3, 6),
                                                                axis=1, independent=True),
        "choice": lambda k: random.choice(k, 7, (5,)),
        "choice_noreplace": lambda k: random.choice(k, 7, (5,), replace=False),
        "choice_p": lambda k: random.choice(k, 5, (8,), p=P5),
        "choice_p_noreplace": lambda k: random.choice(k, 5, (3,), replace=False, p=P5),
        "choice_rows": lambda k: random.choice(k, np.arange(12.0, dtype=np.float32).reshape(4, 3), (2,), axis=0),
        "gumbel": lambda k: random.gumbel(k, (10,)),
        "gumbel_high": lambda k: random.gumbel(k, (10,), mode="high"),
        "exponential": lambda k: random.exponential(k, (10,)),
        "multivariate_normal": lambda k: random.multivariate_normal(k, np.array([1.0, -1.0, 0.5], np.float32),
                                                                    COV.astype(np.float32), (4,)),
        "multivariate_normal_eigh": lambda k: random.multivariate_normal(k, np.array([1.0, -1.0, 0.5], np.float32),
                                                                         COV.astype(np.float32), (4,), method="eigh"),
        "multivariate_normal_svd": lambda k: random.multivariate_normal(k, np.zeros(3, np.float32), COV_BATCH, (4, 2),
                                                                        method="svd"),
        "init_glorot_normal": lambda k: initializers.glorot_normal()(k, (5, 7)),
        "init_glorot_uniform": lambda k: initializers.glorot_uniform()(k, (5, 7)),
        "init_he_uniform": lambda k: initializers.he_uniform()(k, (3, 3, 4, 6)),
        "init_he_normal": lambda k: initializers.he_normal()(k, (4, 6)),
        "init_lecun_normal": lambda k: initializers.lecun_normal()(k, (8, 3)),
        "init_lecun_uniform": lambda k: initializers.lecun_uniform()(k, (8, 3)),
        "init_orthogonal": lambda k: initializers.orthogonal()(k, (5, 7)),
        "init_orthogonal_tall": lambda k: initializers.orthogonal(scale=2.0)(k, (3, 4, 2)),
        "init_normal": lambda k: initializers.normal()(k, (4, 4)),
        "init_uniform": lambda k: initializers.uniform()(k, (4, 4)),
        "init_truncated_normal": lambda k: initializers.truncated_normal()(k, (4, 4)),
        "init_variance_scaling": lambda k: initializers.variance_scaling(0.5, "fan_out", "normal", in_axis=0,
                                                                         out_axis=1)(k, (4, 6, 3)),
        "x64_uniform": lambda k: random.uniform(k, (5,), np.float64),
        "x64_normal": lambda k: random.normal(k, (16,), np.float64),
        "x64_bits": lambda k: random.bits(k, (4,), np.uint64),
        "x64_randint": lambda k: random.randint(k, (6,), -(2 ** 40), 2 ** 40, np.int64),
        "x64_truncated_normal": lambda k: random.truncated_normal(k, -1.0, 1.0, (8,), np.float64),
    }


def run(x64: bool) -> dict:
    import jax
    jax.config.update("jax_enable_x64", x64)
    assert jax.config.jax_threefry_partitionable
    calls = {n: f for n, f in cases(jax.random, jax.nn.initializers).items() if n.startswith("x64_") == x64}
    out = {f"{name}/{seed}": np.asarray(f(jax.random.PRNGKey(seed))) for name, f in calls.items() for seed in SEEDS}
    if x64:
        out.update({f"x64_key/{s}": np.asarray(jax.random.PRNGKey(s)) for s in (-1, 2 ** 40 + 5)})
    else:  # one long shuffle (two sorting rounds), one seed: tests/test_random.py runs it traced
        out["permutation_10000/0"] = np.asarray(jax.random.permutation(jax.random.PRNGKey(0), 10000))
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--x64"]:
        np.savez("/tmp/random_vectors_x64.npz", **run(True))
    else:
        subprocess.run([sys.executable, __file__, "--x64"], check=True)
        vectors = run(False)
        vectors.update(dict(np.load("/tmp/random_vectors_x64.npz")))
        np.savez_compressed("tests/data/random_vectors.npz", **vectors)
        print(len(vectors), "vectors")
