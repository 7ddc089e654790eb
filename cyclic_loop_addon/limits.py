"""Bounds checked before any array is made: numbers in range and the solve's memory. No bpy.

The memory estimate is the solver's own (``solver_core.optimize.memory.peak_bytes``, from the problem's size and
scheme), compared with the memory this process can still use.
"""
import os

from .errors import LoopInputError
from .core import sc

MAX_FRAME = 1048574             # Blender's last frame (MAXFRAME)
MAX_SUBSTEPS = 10000
MAX_ITERATIONS = 100000
GB = 1e9


def check_numbers(iterations, substeps, soft, tolerance, physics_tolerance):
    """Raise LoopInputError for counts and weights no solve can use."""
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise LoopInputError(f"iterations must be between 1 and {MAX_ITERATIONS} (got {iterations}): Gauss-Newton "
                             "needs at least one iteration to improve the loop")
    if not 0 <= substeps <= MAX_SUBSTEPS:
        raise LoopInputError(f"substeps must be 0 (from the physics quality) or 1..{MAX_SUBSTEPS} (got {substeps})")
    if not soft >= 0:
        raise LoopInputError(f"the soft weight of the first two frames must be 0 (hard constraints) or positive "
                             f"(got {soft:g})")
    if not 0 < tolerance < float("inf"):
        raise LoopInputError(f"the tolerance must be a finite positive number (got {tolerance:g})")
    if not 0 <= physics_tolerance < 1:
        raise LoopInputError(f"the physics tolerance is a fraction of the forces at play: 0 (minimize on) or "
                             f"between 0 and 1 (got {physics_tolerance:g})")


def check_frames(start, end, step):
    """The number of loop frames of start..end every ``step``; raise LoopInputError outside Blender's range."""
    for frame in (start, end):
        if not -MAX_FRAME <= frame <= MAX_FRAME:
            raise LoopInputError(f"frame {frame} is outside Blender's frame range (-{MAX_FRAME}..{MAX_FRAME}); "
                                 "pick frames inside the simulation's cache")
    count = (end - start) // step + 1 if end >= start else 0
    if count < 4:
        raise LoopInputError(f"frames {start}..{end} give {count} loop frames; a loop needs at least 4")
    return count


def estimate_bytes(n_frames, substeps, n_vertices, scheme, velocity_terms=False, explicit_terms=False,
                   soft_frames=False, driven=False):
    """Peak memory (bytes) of a solve of this size (``velocity_terms``: Blender cloth's damping;
    ``explicit_terms``: on Blender's own sub-steps, its hinges taken explicitly; ``soft_frames``: soft
    first frames; ``driven``: with the designed gusts)."""
    return sc.optimize.memory.peak_bytes(max(n_vertices, 1), n_frames * max(substeps, 1), scheme, velocity_terms,
                                         explicit_terms, soft_frames, driven)


def available_bytes():
    """Memory this process can still use (available RAM, or its address-space limit), or None if unknown."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        import resource
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            with open(f"/proc/{os.getpid()}/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            found.append(max(limit - used, 0))
    except (ImportError, OSError, ValueError):
        pass
    return min(found) if found else None


def check_memory(n_frames, substeps, n_vertices, scheme, velocity_terms=False, explicit_terms=False,
                 soft_frames=False, driven=False):
    """The estimate (bytes); raise LoopInputError when it does not fit the available memory."""
    need = estimate_bytes(n_frames, substeps, n_vertices, scheme, velocity_terms, explicit_terms, soft_frames,
                          driven)
    have = available_bytes()
    if have is not None and need > have:
        pure = estimate_bytes(n_frames, substeps, n_vertices, scheme, velocity_terms, explicit_terms, soft_frames)
        gusts = (f"; the designed gusts factor the whole loop at once: Allow Gusts off (bake.py --no-gusts) solves "
                 f"it in about {pure / GB:.1f} GB as pure physics, which calms a damped cloth" if pure < need else "")
        raise LoopInputError(
            f"this loop needs about {need / GB:.1f} GB of memory ({n_frames} frames x {max(substeps, 1)} substeps "
            f"x {n_vertices} vertices) but {have / GB:.1f} GB is available: shorten the frame range, lower the "
            f"substeps or loop a coarser mesh{gusts}")
    return need
