"""The block-circulant preconditioner (FFT over frames) against the frame blocks, on the pure-physics solve.

    .venv/bin/python -m benchmarks circulant [--cases square16 square] [--problem P.npz --clip C.npy]
        [--damping 1 1e-3] [--pcg-iters N] [--rtol R] [--combined]

The structured solve's frame blocks (``BlockPreconditioner``) keep all of the spatial coupling of J^T B J and
none between frames. The loop's time coupling is periodic, so the named alternative takes the frame-averaged
operator instead: A_o = diag(coef_o) + mean_j S_o(j) for the offsets o = -1, 0, +1 is block-circulant in time,
the FFT over frames turns it into one m x m system per frequency k,

    (J_k^H J_k + P + lambda D) z_k = r_k,   J_k = B^1/2 sum_o A_o exp(2 pi i k o / N),

(P the penalty diagonal averaged over the frames, D one frame's block of the damping metric), and each is a
complex sparse Cholesky (CHOLMOD, one symbolic analysis for all N / 2 + 1 of them; the others are their
conjugates). It is exact when the stiffness does not vary over the loop; the loop's does.

Per case (``blender_cloth``'s scenes built, baked and gathered as bake.py's defaults gather them, or a saved
problem and its clip), at the crossfade of the cache (the pure-physics route's start), one linearization:
PCG iterations on (J^T B J + P + lambda D) d = -g to the relative residual ``--rtol`` from zero, for each
damping lambda and each preconditioner; the seconds of its setup (the frame blocks' factor, or the averaged
operator's systems and their factors) and of the PCG; the factor's nonzeros; with ``--combined`` also the
symmetric multiplicative combinations of the two (``symmetric_product``). A first row per case checks the
circulant on the operator averaged over the frames, where it is exact: the relative error of P^-1 H x.
Results: benchmarks/results/scale.md; the reasoning: docs/design/scale.md.
"""
import argparse
import time

import numpy as np
import scipy.sparse as sp

from solver_core.baselines import crossfade_loop
from solver_core.optimize.linsolve import cholmod
from solver_core.optimize.structured_solve import StructuredBackend, pcg
from solver_core.physics.forward import single_threaded_blas
from solver_core.physics.residual import residual
from solver_core.starts import on_solver_grid

from .scale import each_case

HEADER = ("case", "damping", "preconditioner", "setup s", "factor nnz", "PCG it", "converged", "PCG s")


class CirculantPreconditioner:
    """(H_bar + lambda D)^-1 for the loop's operator averaged over its frames, by the FFT over frames.

    Parameters
    ----------
    op : LoopOperator
        The structured solve's operator, updated at the linearization.
    metric : scipy.sparse matrix
        The damping metric on the free unknowns (``residual.damping_metric``); its first frame's block is
        every frame's (without contact it does not vary over the loop).
    """

    def __init__(self, op, metric):
        if cholmod is None:
            raise RuntimeError("the circulant preconditioner factors with CHOLMOD (scikit-sparse)")
        self.op = op
        m = op.m
        self.frame_metric = sp.csc_matrix(metric[:m, :m])
        self._analysis = None
        self.systems = []
        self.factors = []

    def update(self):
        """The systems J_k^H J_k + P of the operator's current values, for k = 0 .. N / 2."""
        op = self.op
        m, n = op.m, op.n_steps
        averaged = {}
        for o in (-1, 0, 1):
            block = sp.diags(op.coef[o].astype(complex))
            if o in op.offsets:
                block = block + sp.csr_matrix((op.values[o].mean(axis=0), op.pattern_cols, op.indptr), shape=(m, m))
            averaged[o] = sp.csr_matrix(block)
        weight = sp.diags(op.weight)
        penalty = sp.diags(op.penalty_diag.mean(axis=0))
        self.systems = []
        for k in range(n // 2 + 1):
            jk = weight @ sum(averaged[o] * np.exp(2j * np.pi * k * o / n) for o in averaged)
            self.systems.append(sp.csc_matrix(jk.conj().T @ jk + penalty))

    def damp(self, damping):
        """Factorize every frequency's system with ``damping`` times the frame's metric."""
        self.factors = []
        for system in self.systems:
            matrix = sp.csc_matrix(system + damping * self.frame_metric)
            if self._analysis is None:
                self._analysis = cholmod.analyze(matrix, mode="supernodal", ordering_method="amd")
            self.factors.append(self._analysis.cholesky(matrix))

    def factor_nonzeros(self):
        """Nonzeros of all the factors (complex)."""
        return sum(f.L().nnz for f in self.factors)

    def apply(self, r):
        """The preconditioned residual: r's frames to frequencies, one solve per frequency, back."""
        op = self.op
        spectrum = np.fft.rfft(op.embed(r), axis=0)
        solved = np.empty_like(spectrum)
        for k, factor in enumerate(self.factors):
            solved[k] = factor(spectrum[k])
        return op.restrict(np.fft.irfft(solved, n=op.n_steps, axis=0))


def symmetric_product(apply_a, outer, inner):
    """The symmetric multiplicative combination of two preconditioners: ``outer``, then ``inner`` on the
    residual left, then ``outer`` again (a symmetric preconditioner of three applications and two products)."""
    def apply(r):
        z = outer(r)
        z = z + inner(r - apply_a(z))
        return z + outer(r - apply_a(z))
    return apply


def averaged_error(prob, q, damping=1.0, seed=0):
    """Relative error of P^-1 (H + lambda D) x for a random x, the operator's values replaced by their mean over
    the frames and its penalty spread evenly over them: the circulant's own accuracy (zero up to rounding)."""
    backend = StructuredBackend(preconditioner="blocks")
    backend.bind(prob)
    backend.linearize(q, residual(prob, q))
    op = backend.op
    for o in op.offsets:
        op.values[o][:] = op.values[o].mean(axis=0)
        op._matrix[o].data = op.values[o].ravel()
    op.penalty_diag[:] = op.penalty_diag.mean(axis=0)
    circulant = CirculantPreconditioner(op, backend.metric)
    circulant.update()
    circulant.damp(damping)
    x = np.random.default_rng(seed).standard_normal(op.n_free)
    hx = op.apply_h(x) + damping * (backend.metric @ x)
    return float(np.linalg.norm(circulant.apply(hx) - x) / np.linalg.norm(x))


def print_row(*cells):
    """One row of the table, its cells joined as HEADER's."""
    print(" | ".join(map(str, cells)), flush=True)


def run_case(label, prob, clip, args):
    """Print the rows of one case: the averaged check, then per damping the frame blocks and the circulant."""
    q = prob.apply_constraints(on_solver_grid(prob, crossfade_loop(clip)))
    print_row(label, "-", "circulant on the averaged operator", "-", "-", f"error {averaged_error(prob, q):.1e}",
              "-", "-")
    backend = StructuredBackend(preconditioner="blocks")
    backend.bind(prob)
    with single_threaded_blas():
        g = backend.linearize(q, residual(prob, q))
        metric = backend.metric
        # the frame blocks' factor size, from a factor of its own (L() would turn the solve's into a simplicial one)
        blocks_nnz = cholmod.cholesky(backend.preconditioner.matrix() + metric).L().nnz
        blocks = backend.preconditioner
        circulant = CirculantPreconditioner(backend.op, metric)
        t = time.perf_counter()
        circulant.update()
        built = time.perf_counter() - t
        for damping in args.damping:
            def apply_a(x):
                return backend.op.apply_h(x) + damping * (metric @ x)

            def solve_row(name, setup, nnz, apply_m):
                t = time.perf_counter()
                _, it, ok = pcg(apply_a, -g, apply_m, args.rtol, args.pcg_iters)
                print_row(label, damping, name, setup, nnz, it, ok, f"{time.perf_counter() - t:.1f}")

            t = time.perf_counter()
            blocks.damp(damping, metric)
            solve_row("frame blocks", f"{time.perf_counter() - t:.1f}", blocks_nnz, blocks.apply)
            t = time.perf_counter()
            circulant.damp(damping)
            solve_row("circulant", f"{built + time.perf_counter() - t:.1f}", circulant.factor_nonzeros(),
                      circulant.apply)
            if args.combined:
                solve_row("blocks, circulant, blocks", "-", "-",
                          symmetric_product(apply_a, blocks.apply, circulant.apply))
                solve_row("circulant, blocks, circulant", "-", "-",
                          symmetric_product(apply_a, circulant.apply, blocks.apply))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks circulant", description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="*", default=["square16", "square"], choices=["flag", "square16", "square"])
    p.add_argument("--problem", help="a saved problem (solver_core.save_problem) instead of the cases")
    p.add_argument("--clip", help="its clip (.npy)")
    p.add_argument("--damping", nargs="*", type=float, default=[1.0, 1e-3],
                   help="Levenberg-Marquardt dampings, on the damping metric (default 1 and 1e-3)")
    p.add_argument("--pcg-iters", type=int, default=1000, help="PCG iterations per solve at most")
    p.add_argument("--combined", action="store_true",
                   help="also the two symmetric multiplicative combinations of the frame blocks and the circulant")
    p.add_argument("--rtol", type=float, default=1e-3, help="PCG's relative residual (the frame blocks' forcing)")
    args = p.parse_args(argv)
    print_row(*HEADER)
    each_case(args, run_case)
