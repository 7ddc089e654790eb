"""Side-by-side metrics of a loop and its baselines, as printed by the demos and benchmarks."""
from .baselines import crossfade_loop
from .forward import simulate
from .metrics import loop_metrics

COLUMNS = ("loss", "position_jump", "velocity_jump", "velocity_jump_ratio", "residual_rel_mean", "residual_rel_max")


def compare(prob, res):
    """{name: metrics} for the forward simulation, the crossfade, the initial guess and the loop."""
    clip = simulate(prob)
    rows = {"forward": loop_metrics(prob, clip), "crossfade": loop_metrics(prob, crossfade_loop(clip))}
    rows[f"init ({res.init_used})"] = loop_metrics(prob, res.initial_guess)
    rows["loop"] = loop_metrics(prob, res.q_steps)
    return rows


def format_table(rows, columns=COLUMNS):
    """A plain-text table of metrics rows."""
    width = max(len(name) for name in rows) + 2
    lines = ["".ljust(width) + "".join(c.rjust(20) for c in columns)]
    for name, m in rows.items():
        lines.append(name.ljust(width) + "".join(f"{m[c]:20.4g}" for c in columns))
    return "\n".join(lines)
