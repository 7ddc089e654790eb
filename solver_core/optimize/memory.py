"""Peak memory of ``make_loop`` from the problem's size, before any work: for farm host requirements.

A model calibrated on measured peak resident sizes (docs/design/tuning.md: Memory model). The structured solve
is linear in the unknowns, with the sparse values of one time offset per unknown and more for each further
offset the operator stores (``sparse_offsets``: the linearized scheme's Jacobian derivative, the velocity terms,
the explicit terms' offset -1). The direct solve (CHOLMOD) holds its factor, ``gauss_newton.factor_nonzeros``:
the loop's matrix is banded in time, so the fill is the unknowns times those of one step (times
``LinearSolveOptions.factor_fill``); the driven solve (the designed gusts) holds its Jacobian beside it. The
estimate is of a solve with the default options.
"""
from .driven import fits
from .gauss_newton import auto_structured, factor_nonzeros
from ..physics.scheme import offsets

BASE_BYTES = 250e6                    # Python, numpy, SciPy, the problem and a few trajectories
STRUCTURED_BYTES_PER_UNKNOWN = 2.8e3  # the structured solve, with one sparse time offset
# per further sparse offset: values (8 B), CSR index (4 B) and the sweep's values (8 B) of the ~55 entries a
# row of Blender cloth has per unknown
OFFSET_BYTES_PER_UNKNOWN = 1.1e3
# soft first frames: the structured solve's frame-block preconditioner (one sparse factor per frame and the
# Gauss–Newton matrix's diagonal blocks it factors); their fill grows with the log of a frame's vertices,
# which this leaves out
FRAME_BLOCK_BYTES_PER_UNKNOWN = 16.2e3
BYTES_PER_FACTOR_NONZERO = 16.0       # value and row index, plus CHOLMOD's workspace while factoring
# the driven solve beside its factor: its Jacobian's pattern and values (the physics rows and the driving
# force's columns), J^T J and the trial iterates' residual blocks
DRIVEN_BYTES_PER_UNKNOWN = 33e3


def sparse_offsets(scheme, velocity_terms=False, explicit_terms=False):
    """How many time offsets the structured operator holds sparse values for (``scheme.derivative_pattern``):
    the force Jacobian's (and for "linearized" its derivative's, offset 0), the velocity terms' (their
    position and their two velocity offsets) and, with ``explicit_terms`` (the linearized scheme on
    Blender's own sub-steps), the explicit terms' offsets 0 and -1."""
    p_off, v_off = offsets(scheme)
    used = {1, 0} if scheme == "linearized" else {p_off}
    if velocity_terms:
        used |= {p_off, v_off, v_off - 1}
    if explicit_terms:
        used |= {0, -1} if velocity_terms else {0}
    return len(used)


def peak_bytes(n_vertices, n_steps, scheme, velocity_terms=False, explicit_terms=False, soft_frames=False,
               driven=False):
    """Estimated peak resident bytes of ``make_loop`` on ``n_vertices`` x ``n_steps`` (frames x substeps).

    ``scheme``: the problem's residual scheme; ``velocity_terms``: the model has velocity-dependent forces
    (Blender cloth), which keep the solve on CHOLMOD below ``auto_structured_min_unknowns_velocity`` unknowns;
    ``explicit_terms``: the linearized scheme takes some terms explicitly (Blender cloth on its sub-steps);
    ``soft_frames``: the first frames are soft, so the structured solve factors frame blocks
    (``structured_solve.choose_preconditioner``); ``driven``: a designed driving force is asked for, which
    factors directly up to the size ``optimize.driven.fits`` takes (larger loops are pure physics)."""
    if n_vertices < 1 or n_steps < 1:
        raise ValueError(f"need at least one vertex and one step, got {n_vertices} vertices, {n_steps} steps")
    unknowns = 3 * n_vertices * n_steps
    if driven and fits(unknowns, n_steps):
        return (BASE_BYTES + BYTES_PER_FACTOR_NONZERO * factor_nonzeros(unknowns, n_steps)
                + DRIVEN_BYTES_PER_UNKNOWN * unknowns)
    if auto_structured(unknowns, n_steps, velocity_terms):
        extra = sparse_offsets(scheme, velocity_terms, explicit_terms) - 1
        blocks = FRAME_BLOCK_BYTES_PER_UNKNOWN if soft_frames else 0.0
        return BASE_BYTES + (STRUCTURED_BYTES_PER_UNKNOWN + extra * OFFSET_BYTES_PER_UNKNOWN + blocks) * unknowns
    return BASE_BYTES + BYTES_PER_FACTOR_NONZERO * factor_nonzeros(unknowns, n_steps)
