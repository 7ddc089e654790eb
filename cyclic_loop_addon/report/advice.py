"""Technical failures in words an artist can act on (the technical text goes to the system console)."""
import re

SOLVED_INSIDE = "the solver ran inside Blender, so the interface may pause during a solve"


def python_note(reason):
    """The note when no separate Python can run the solver: what it means and what to install, from the
    probe's ``reason`` (child_solve.find_python)."""
    missing = sorted(set(re.findall(r"No module named '([\w.]+)'", reason)))
    if missing:
        names = ", ".join(m.split(".")[0] for m in missing)
        return (f"{SOLVED_INSIDE}. To keep it responsive, install {names} for the system Python "
                "(e.g. python3-scipy) — the loop is the same either way")
    if " has {" in reason:
        return (f"{SOLVED_INSIDE}: the system Python has other numpy / SciPy versions than Blender's "
                "(the loop is the same either way)")
    return f"{SOLVED_INSIDE}: no separate Python was found (the loop is the same either way)"
