"""The paper's Table 1 for this implementation, with the paper's numbers (8-core i7, C++, CHOLMOD) beside it.

    python -m benchmarks table1 [--scenes NAME ...] [--scale S] [--max-iters K] [--backend B] [--budget SECONDS]

Cost is also given in units of one forward simulation of the same clip (timed in the same process): the
floor any physical loop pays, and a figure that holds across machines of different speed.
"""
import argparse
import time

from solver_core.baselines import crossfade_loop
from solver_core.physics.forward import simulate
from solver_core.loop import make_loop
from solver_core.metrics import loop_metrics
from solver_core.scenes.paper import SCENES


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def run_scene(name, scale=1.0, max_iters=1000, backend="auto", budget=None):
    """Build and solve one scene; returns a dict of Table 1 figures. ``budget``: seconds of wall time after
    which make_loop is cancelled and its best loop so far measured (status 4), so a scene that crawls still
    gives its row."""
    t0 = time.perf_counter()
    scene = SCENES[name](scale)
    build = time.perf_counter() - t0
    prob = scene.prob
    t0 = time.perf_counter()
    clip = simulate(prob)
    forward_s = time.perf_counter() - t0
    deadline = None if budget is None else time.perf_counter() + budget
    res = make_loop(prob, init=scene.init, max_iters=max_iters, backend=backend,
                    callback=None if deadline is None else lambda info: time.perf_counter() > deadline)
    rows = {"forward": loop_metrics(prob, clip), "crossfade": loop_metrics(prob, crossfade_loop(clip)),
            "init": res.metrics["initial"], "loop": res.metrics["loop"]}
    fp_it, gn_it = res.fast_projection_iterations, res.gauss_newton_iterations
    return dict(name=name, vertices=prob.n_vertices, elements=scene.n_elements, frames=prob.n_frames,
                fp_it=fp_it or None, gn_it=gn_it,
                fp_s=res.fast_projection_seconds / fp_it if fp_it else None,
                gn_s=res.gauss_newton_seconds / gn_it if gn_it else None, total=res.seconds, build=build,
                forward_s=forward_s, init=res.init_used, status=res.status, message=res.message,
                metrics=rows, paper=scene.paper)


_PERFORMANCE = (f"{'scene':<15}{'verts':>6}{'elems':>6}{'frames':>7}{'FP it':>7}{'GN it':>7}{'FP s/it':>9}"
                f"{'GN s/it':>9}{'total s':>9}{'fwd s':>8}{'x fwd':>7}  init / status")
_QUALITY = f"{'scene':<15}{'':<10}{'loss':>12}{'vel jump':>12}{'vel ratio':>11}{'pos ratio':>11}{'resid rel':>11}"


def _performance(r):
    """One scene's performance lines: ours, then the paper's."""
    v, e, f, fpi, gni, fps, gns = r["paper"]
    return [f"{r['name']:<15}{r['vertices']:>6}{r['elements']:>6}{r['frames']:>7}{_fmt(r['fp_it'], 'd'):>7}"
            f"{r['gn_it']:>7}{_fmt(r['fp_s'], '.3f'):>9}{_fmt(r['gn_s'], '.3f'):>9}{r['total']:>9.1f}"
            f"{r['forward_s']:>8.2f}{r['total'] / max(r['forward_s'], 1e-9):>7.1f}  {r['init']} / {r['status']}",
            f"{'  paper':<15}{v:>6}{_fmt(e, 'd'):>6}{f:>7}{_fmt(fpi, 'd'):>7}{gni:>7}{_fmt(fps, '.1f'):>9}{gns:>9.1f}"]


def _quality(r):
    """One scene's quality lines: forward, crossfade, initial guess, loop."""
    return [f"{r['name'] if k == 0 else '':<15}{label:<10}{m['loss']:>12.4g}{m['velocity_jump']:>12.3g}"
            f"{m['velocity_jump_ratio']:>11.3g}{m['position_jump_ratio']:>11.3g}{m['residual_rel_mean']:>11.3g}"
            for k, (label, m) in enumerate(r["metrics"].items())]


def print_table(results):
    """Print performance (ours / paper) and quality tables."""
    print("Performance (ours above, paper below; s/it = seconds per iteration; fwd = one forward simulation)")
    print(_PERFORMANCE)
    for r in results:
        print("\n".join(_performance(r)))
    print()
    print("Quality: loss E[q], jumps at the wrap (velocity m/s) and their ratios to the median frame boundary")
    print(_QUALITY)
    for r in results:
        print("\n".join(_quality(r)))
    print()
    for r in results:
        print(f"{r['name']}: {r['message']}")


def run_benchmark(names=None, scale=1.0, max_iters=1000, backend="auto", budget=None):
    """Run the scenes (default all), printing each scene's rows as it finishes, then Table 1; ``budget``:
    seconds per scene (``run_scene``)."""
    results = []
    print(_PERFORMANCE, _QUALITY, sep="\n", end="\n\n")
    for name in names or list(SCENES):
        r = run_scene(name, scale, max_iters, backend, budget)
        print(f"  {name}: {r['total']:.1f} s ({r['total'] / max(r['forward_s'], 1e-9):.1f} forward simulations)",
              *_performance(r)[:1], *_quality(r), f"{name}: {r['message']}", sep="\n", end="\n\n", flush=True)
        results.append(r)
    print_table(results)
    return results


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks table1", description=__doc__.splitlines()[0])
    p.add_argument("--scenes", nargs="*", choices=list(SCENES), help="scenes to run (default all)")
    p.add_argument("--scale", type=float, default=1.0, help="mesh and frame scale (1 = paper size)")
    p.add_argument("--max-iters", type=int, default=1000)
    p.add_argument("--backend", default="auto")
    p.add_argument("--budget", type=float, help="cancel a scene's make_loop after this many seconds and "
                                                "measure its best loop so far")
    args = p.parse_args(argv)
    run_benchmark(args.scenes, args.scale, args.max_iters, args.backend, args.budget)
