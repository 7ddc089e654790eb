"""The solver's tuning values, in one place.

Each value is a field of a frozen dataclass with a one-line meaning; the measurements that chose it are in
``docs/design/tuning.md`` under the field's name. ``Options`` groups them as scipy groups ``tr_options``:
pass ``Options(...)`` (or ``DEFAULTS`` with ``dataclasses.replace``) to ``make_loop``, ``loop_clip``,
``GaussNewton`` or ``fast_projection`` to change one for a run; nothing patches module globals.

    from dataclasses import replace
    opts = replace(DEFAULTS, gauss_newton=replace(DEFAULTS.gauss_newton, smoothing=0.0))
"""
from dataclasses import dataclass, field

# Defaults of the public functions' own arguments (they are arguments, not options: a caller passes them).
TOL = 1e-6              # Gauss–Newton converges when the loss falls by less than this, relative, per iteration
MAX_ITERS = 200         # make_loop's default cap on Gauss–Newton iterations
PHYSICS_TOL = 0.01      # loop_clip: a seamless loop with mean relative residual at most this is converged
SEAMLESS_RATIO = 1.5    # a wrap whose jumps are within this factor of the median frame boundary cannot be seen


@dataclass(frozen=True)
class GaussNewtonOptions:
    """Levenberg–Marquardt (``gauss_newton.GaussNewton``): damping, step acceptance, stopping rules,
    geodesic acceleration and the smoothing metric. Evidence: docs/design/tuning.md, a section per field."""
    max_damping_raises: int = 12        # trust-region shrinks per iteration before the iteration gives up
    damping0: float = 1e-3              # first damping, relative to the inertia metric (direct solves)
    damping_restart: float = 1e-4       # damping after a rejected undamped step when none was switched off yet
    damping_off: float = 1e-6           # below this the damping is switched off (plain Gauss–Newton steps)
    damping_start: float = 1e-6         # structured solve: start at this times median diag(J^T B J) / D
    accept: float = 1e-4                # a step is taken when the loss falls by this fraction of the prediction
    window: int = 10                    # iterations per window of the linear-crawl estimate (``remaining``)
    ftol: float = 3e-3                  # a crawl whose remaining decrease is below this fraction has settled
    kink_window: int = 3                # iterations of rejected-first steps that mean a switch in the laws
    accelerate: bool = True             # try the geodesic acceleration (Transtrum & Sethna 2012)
    accel_max: float = 0.75             # take v + a/2 only when 2 |a| / |v| is at most this
    accel_h: float = 0.1                # central-difference step of r_vv, relative to |v|
    accel_h_switching: float = 1e-3     # the same on models whose laws switch (Blender cloth)
    accel_idle: int = 3                 # trials far from use before the acceleration is skipped
    accel_negligible: float = 1e-3      # 2 |a| / |v| below this: the same step as v's
    accel_far: float = 5.0              # 2 |a| / |v| above this: a step never taken
    smoothing: float = 2.0              # weight of the mesh's graph Laplacian in the damping metric


@dataclass(frozen=True)
class LinearSolveOptions:
    """Gauss–Newton's linear solves (``linsolve``, ``structured_solve``) and the choice between them.
    Evidence: docs/design/tuning.md, a section per field."""
    factor_fill: float = 2.2                        # CHOLMOD factor nonzeros per (unknowns x unknowns per step)
    auto_direct_max_factor_nonzeros: float = 130e6  # "auto" takes the direct solve up to this factor size
    auto_structured_min_unknowns_velocity: int = 60_000   # with velocity terms: structured from this many unknowns
    auto_direct_max_factor_nonzeros_scipy: float = 1e7   # without CHOLMOD (SciPy's LU) the direct solve up to this
    reuse: bool = True                  # direct solves try CG preconditioned by the last factorization first
    reuse_rtol: float = 1e-8            # CG on the last factorization must reach this relative residual
    reuse_cg_iters: int = 24            # ... within this many iterations
    reuse_pace: int = 3                 # ... and from this iteration on keep the pace that reaches it in time
    reuse_damping_ratio: float = 20.0   # not tried when the damping moved more than this factor
    best_ordering_min_unknowns: int = 5_000   # CHOLMOD's "best" ordering from here on, AMD below
    shift_safety: float = 1.2           # margin on the Lanczos estimate of a frame's destabilizing stiffness
    stable_above: float = 4.0           # a frame whose largest scaled stiffness reaches this is not shifted
    damped_refactor: float = 4.0        # refactorize the frame blocks when the damping moved by this factor
    sweep_forcing: float = 0.1          # structured solve, time sweep: PCG's forcing (relative residual, model test)
    sweep_max_cg: int = 60              # ... and its PCG iterations per direction while loose
    blocks_forcing: float = 1e-3        # structured solve, frame blocks (soft first frames): PCG's forcing
    blocks_max_cg: int = 400            # ... and its PCG iterations per direction while loose
    rtol_min: float = 1e-10             # structured solve: the tightest relative residual PCG is asked for
    max_tighten: int = 2                # structured solve: tightenings (forcing / 10, cap x 4) before it gives up


@dataclass(frozen=True)
class StartOptions:
    """The initial guess and the races between starts (``starts``, ``loop``, ``clip_loop``, ``reversible``);
    evidence in ``docs/design/tuning_starts.md`` under each field's name."""
    race_iterations: int = 10           # after a failed fast projection: iterations from each start
    race_final_iterations: int = 40     # ... then the two lowest go on to this many
    forward_race_iterations: int = 20   # init "forward": iterations from the clip and from closed_forward
    relax_eps: float = 0.0              # soft conditions of this eps after hard ones left a visible wrap (0: never)
    two_sided: bool = True              # reversible dynamics (N bodies) start from the two-sided guess
    blend: float = 0.25                 # two-sided guess: half-width of the blend, a fraction of the steps
    race_from: int = 3                  # "cache_or_forward": the trailing run may be dropped from here on
    behind: float = 10.0                # ... when its loss exceeds this times the first run's (inf: never)
    diverged_extent: float = 10.0       # a loop this many clip sizes away from the clip has diverged


@dataclass(frozen=True)
class FastProjectionOptions:
    """Fast projection (paper Algorithm 2, ``fast_projection``); evidence in ``docs/design/tuning_starts.md``
    under each field's name."""
    max_iters: int = 30                 # iteration cap
    rtol: float = 1e-6                  # converged when G falls to this fraction of G(0)
    accept: float = 0.1                 # an open loop is still accepted up to this RMS mismatch (median steps)
    decrease: float = 1e-4              # a step is taken when G falls by this fraction of the prediction
    gram_max_rows: int = 3000           # exact Gram-matrix steps up to this many closure rows, LSQR beyond
    mu0: float = 1e-3                   # first trust radius, a fraction of the Gram matrix's largest eigenvalue
    krylov_iters: int = 40              # LSQR iterations per step beyond gram_max_rows
    krylov_tol: float = 1e-3            # LSQR's tolerance there
    max_rejections: int = 8             # trust-region shrinks per iteration before it gives up
    stall_window: int = 5               # stop when G has not halved over this many iterations (radius not grown)
    stop_fraction: float = 0.0          # stop once G falls to this fraction of G(0) (benchmarks; 0: never)


@dataclass(frozen=True)
class MotionOptions:
    """A loop made from a clip (``loop_clip``): the driving force designed with it and how it keeps the clip's
    motion (``driving``, ``optimize.driven``); evidence in ``docs/design/motion.md`` under each field's name."""
    drive: str = "auto"                 # "auto" (the scene's wind, else body modes), "wind", "modes" or "none"
    closed_gap: float = 1.0             # start from the closed clip when its wrap gap is below this many motions,
                                        # else from its crossfade
    keep_speed: float = 100.0           # weight of the relative kinetic-energy error against the clip's (0: off)
    wind_bound: float = 2.0             # the designed wind's peak at most this times the scene wind's (0: no bound)
    bound_weight: float = 1e3           # weight of the bound's hinge penalty on the relative excess
    size: float = 1e-2                  # weight of the driving force's size, relative to a residual force's
    roughness: float = 1.0              # weight of its periodic second difference in time
    modes: int = 6                      # body modes: the mesh's lowest Laplacian eigenvectors, 3 coefficients each
    speed_band: float = 0.1             # converged once the speed is within this fraction of the clip's ...
    bound_slack: float = 0.02           # ... the wind within this fraction over its bound, the loop seamless and
                                        # its residual outside the driving force within ``physics_tol``
    settle: float = 1e-3                # ... or once the loss falls by less than this fraction in an iteration
    damping0: float = 1e-3              # Levenberg–Marquardt's first damping, relative to the inertia metric


@dataclass(frozen=True)
class Options:
    """Every tuning value of a solve, grouped by the part of the solver that reads it."""
    gauss_newton: GaussNewtonOptions = field(default_factory=GaussNewtonOptions)
    linear_solve: LinearSolveOptions = field(default_factory=LinearSolveOptions)
    start: StartOptions = field(default_factory=StartOptions)
    fast_projection: FastProjectionOptions = field(default_factory=FastProjectionOptions)
    motion: MotionOptions = field(default_factory=MotionOptions)


DEFAULTS = Options()
