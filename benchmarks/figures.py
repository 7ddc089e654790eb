"""Figures as PNG: the flag's seam, the doughnut's centre of mass (paper Fig. 9), swinging-cloth convergence.

The flag's seam: forward clip, crossfade and loop; the paper's Fig. 9 and Fig. 11d for this implementation.

    python -m benchmarks figures [--out DIR] [--scale S] [--max-iters K] [--backend B]
"""
import argparse
import os

import numpy as np

from solver_core.baselines import crossfade_loop
from solver_core.physics.forward import simulate
from solver_core.loop import make_loop
from solver_core.scenes.paper import SCENES

from .seam_plot import save_seam_plot


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def doughnut_center_of_mass(path, scale=1.0, max_iters=300, backend="auto"):
    """Height and vertical velocity of the doughnut's centre of mass over two periods for the forward
    simulation, fast projection and the loop (paper Fig. 9). Returns the three curves."""
    scene = SCENES["doughnut"](scale)
    prob = scene.prob
    res = make_loop(prob, init="fast_projection", max_iters=max_iters, backend=backend)
    mass = prob.model.mass / prob.model.mass.sum()
    curves = {"forward simulation": simulate(prob), f"initial guess ({res.init_used})": res.initial_guess,
              "cyclic loop (ours)": res.q_steps}
    plt = _pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    periods = 2
    t = np.arange(periods * prob.n_steps + 1) * prob.h
    out = {}
    for label, q in curves.items():
        z = np.einsum("n,jn->j", mass, q[..., 2])
        z = np.concatenate([np.tile(z, periods), z[:1]])
        v = np.diff(z) / prob.h
        out[label] = (z, v)
        axes[0].plot(t, z, label=label)
        axes[1].plot(t[:-1], v, label=label)
    for ax in axes:
        ax.axvline(prob.n_steps * prob.h, color="gray", ls=":", lw=1)
    axes[0].set_ylabel("centre of mass height (m)")
    axes[1].set_ylabel("vertical velocity (m/s)")
    axes[1].set_xlabel("time (s), two periods; dotted: the wrap")
    axes[0].legend(fontsize=8)
    fig.suptitle("Bouncing doughnut (paper Fig. 9)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return out


def swinging_cloth_convergence(path, scale=1.0, max_iters=100, backend="auto"):
    """Gauss–Newton loss per iteration from the three initial guesses (paper Fig. 11d)."""
    scene = SCENES["swinging_cloth"](scale)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    finals = {}
    for init in ("fast_projection", "forward", "crossfade"):
        res = make_loop(scene.prob, init=init, max_iters=max_iters, backend=backend)
        losses = [h["loss"] for h in res.history if h["phase"] == "gauss_newton"]
        ax.semilogy(losses, label=f"{init} (used: {res.init_used})")
        finals[init] = losses[-1]
    ax.set_xlabel("Gauss–Newton iteration")
    ax.set_ylabel("loss E[q]")
    ax.set_title("Swinging cloth: convergence from three initial guesses (paper Fig. 11d)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return finals


def flag_seam(path, scale=1.0, max_iters=1000, backend="auto"):
    """Three vertices of the flag over two periods: the forward clip played as a loop, its crossfade and
    our loop, the wrap marked. Returns the LoopResult."""
    prob = SCENES["flag"](scale).prob
    res = make_loop(prob, max_iters=max_iters, backend=backend)
    clip = simulate(prob)
    loops = {"forward clip played as a loop": clip, "crossfade": crossfade_loop(clip), "cyclic loop (ours)": res.q_steps}
    save_seam_plot(path, loops, prob.h, title=f"Flag: the seam ({res.message.split(':')[0]})")
    return res


def make_figures(out_dir, scale=1.0, max_iters=1000, backend="auto"):
    """Save the figures as PNG in ``out_dir`` and print where."""
    os.makedirs(out_dir, exist_ok=True)
    s = os.path.join(out_dir, "flag_seam.png")
    res = flag_seam(s, scale, max_iters, backend)
    print(f"figure: {s}  ({res.message})")
    a = os.path.join(out_dir, "doughnut_center_of_mass.png")
    doughnut_center_of_mass(a, scale, max_iters, backend)
    print(f"figure: {a}")
    b = os.path.join(out_dir, "swinging_cloth_convergence.png")
    finals = swinging_cloth_convergence(b, scale, max_iters, backend)
    print(f"figure: {b}  final losses: " + ", ".join(f"{k} {v:.4g}" for k, v in finals.items()))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks figures", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--max-iters", type=int, default=1000)
    p.add_argument("--backend", default="auto")
    args = p.parse_args(argv)
    make_figures(args.out, args.scale, args.max_iters, args.backend)
