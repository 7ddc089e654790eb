"""Time discretizations of the equations of motion: the residual of one step and its derivative parts.

Row j couples q_{j-1}, q_j, q_{j+1}. With a_j = (q_{j+1} - 2 q_j + q_{j-1}) / h^2 and v_k = (q_k - q_{k-1}) / h:

  symplectic (eq. 14): u_j = M a_j + D v_j     - F(q_j)     - G(q_j, v_j)
  backward   (eq. 13): u_j = M a_j + D v_{j+1} - F(q_{j+1}) - G(q_{j+1}, v_{j+1})
  linearized:          u_j = M a_j + D v_{j+1} - F(q_j) - dF_I/dq(q_j) (q_{j+1} - q_j) - G_I(q_j, v_{j+1})
                             - G_E(q_j, v_j)

F: position forces, D: the model's per-vertex linear drag, G: its velocity terms (linear in v). "linearized"
is backward Euler with the forces linearized at the current state, one Newton step per step (Baraff and
Witkin 1998): the integrator of Blender's cloth, so its caches have a small residual under it. The terms
explicit at the problem's step (``Model.split_explicit``: F_E, G_E; the rest F_I, G_I) it takes at the step's
start without their Jacobian, as Blender adds its angular springs and their damping on its own sub-steps.

The derivative of u_j with respect to q_{j+o} is a diagonal (inertia, drag) plus sparse parts on the
model's fixed Jacobian patterns. For "linearized" the part d/dq_j [dF_I/dq(q_j) s] (s = q_{j+1} - q_j) is
the derivative of the force Jacobian along s (second derivatives commute), ``Model.jacobian_derivative``;
the explicit terms add -dF_E/dq and -dG_E/dq - dG_E/dv / h at offset 0 and dG_E/dv / h at offset -1.
"""
import numpy as np

from .models.base import pattern_product

SCHEMES = ("symplectic", "backward", "linearized")
# (step offset of the positions the forces see, step offset k of the velocity v_k they see)
_OFFSETS = {"symplectic": (0, 0), "backward": (1, 1), "linearized": (0, 1)}


def offsets(scheme):
    """``(position offset, velocity offset)`` of the forces in row j relative to j."""
    return _OFFSETS[scheme]


def split(prob):
    """``(implicit, explicit)`` models of the scheme's terms: ``Model.split_explicit`` for "linearized",
    else ``(model, None)``."""
    return prob.model.split_explicit(prob.h) if prob.scheme == "linearized" else (prob.model, None)


def _force_arguments(prob, q_prev, q_here, q_next, j):
    """(positions, velocities, frame times) the forces of rows ``j`` see."""
    p_off, v_off = offsets(prob.scheme)
    states = {-1: q_prev, 0: q_here, 1: q_next}
    v = (states[v_off] - states[v_off - 1]) / prob.h
    return states[p_off], v, prob.step_times(np.asarray(j) + p_off)


def step_rows(prob, q_prev, q_here, q_next, j, force_jacobian=None):
    """Residual forces u_j ``(B, n, 3)`` of rows ``j`` ``(B,)`` from the states of each row (pinned rows included).

    ``force_jacobian``: values (B, nnz) of dF_I/dq at the positions the forces see, reused by the linearized
    scheme instead of evaluating them again.
    """
    model, h = prob.model, prob.h
    implicit, explicit = split(prob)
    x, v, t = _force_arguments(prob, q_prev, q_here, q_next, j)
    u = model.mass[:, None] * (q_next - 2 * q_here + q_prev) / h ** 2 + model.drag[:, None] * v
    if prob.scheme == "linearized" and force_jacobian is None:
        # the forces and their product along the step from one evaluation of each term's geometry
        forces, product = implicit.forces_and_jacobian_dot(x, t, q_next - q_here)
        u = u - forces - product
        if explicit is not None:
            u = u - explicit.forces(x, t)
    else:
        u = u - model.forces(x, t)
    if implicit.velocity_terms:
        u = u - implicit.velocity_forces(x, v, t)
    if explicit is not None and explicit.velocity_terms:
        u = u - explicit.velocity_forces(x, (q_here - q_prev) / h, t)
    if prob.scheme == "linearized" and force_jacobian is not None:
        rows, cols = implicit.jacobian_pattern()
        u = u - pattern_product(rows, cols, force_jacobian, q_next - q_here, 3 * model.n_vertices).reshape(u.shape)
    return u


def diagonals(prob):
    """``{offset: (3n,)}``: the inertia and drag coefficients of du_j/dq_{j+offset}."""
    model, h = prob.model, prob.h
    m = np.repeat(model.mass, 3)
    d = np.repeat(model.drag, 3)
    _, v_off = offsets(prob.scheme)
    coeff = {1: m / h ** 2, 0: -2 * m / h ** 2, -1: m / h ** 2}
    coeff[v_off] = coeff[v_off] + d / h
    coeff[v_off - 1] = coeff[v_off - 1] - d / h
    return coeff


def derivative_pattern(prob):
    """``[(offset, rows, cols)]``: the sparse parts of du_j/dq_{j+offset} on the model's patterns.

    In order: the force Jacobian (for "linearized" of the implicit terms, then its derivative), for
    "linearized" the explicit terms' force Jacobian, then per group of velocity terms (implicit, explicit)
    the parts of dG/dq and of dG/dv at the velocity's two offsets (``sweep_parts`` relies on it).
    """
    p_off, v_off = offsets(prob.scheme)
    implicit, explicit = split(prob)
    frows, fcols = implicit.jacobian_pattern()
    parts = [(1, frows, fcols), (0, frows, fcols)] if prob.scheme == "linearized" else [(p_off, frows, fcols)]
    if explicit is not None and explicit.terms:
        parts.append((0,) + explicit.jacobian_pattern())
    for group, k in ((implicit, v_off), (explicit, 0)):
        if group is not None and group.velocity_terms:
            vrows, vcols = group.velocity_jacobian_pattern()
            parts += [(p_off, vrows, vcols), (k, vrows, vcols), (k - 1, vrows, vcols)]
    return parts


def pattern_groups(parts, indices):
    """The ``indices`` into ``parts`` (``derivative_pattern``'s) grouped by identical (rows, cols) patterns, in order:
    such parts (a velocity term's dG/dq and dG/dv, Blender cloth's damping on its springs' and hinges' patterns)
    can be added before they are summed onto a matrix."""
    groups = []
    for i in indices:
        same = [g for g in groups if np.array_equal(parts[g[0]][1], parts[i][1])
                and np.array_equal(parts[g[0]][2], parts[i][2])]
        if same:
            same[0].append(i)
        else:
            groups.append([i])
    return groups


def sum_parts(values, groups, out):
    """Rows ``out`` (B, slots) = the part values (B, entries) of ``derivative_values`` summed onto slots by ``groups``:
    [(part indices on one pattern (``pattern_groups``), 0/1 CSR (slots x that pattern's entries))]; ``values`` are
    left as they are."""
    out[:] = 0.0
    for indices, matrix in groups:
        total = values[indices[0]] if len(indices) == 1 else np.add(values[indices[0]], values[indices[1]])
        for k in indices[2:]:
            total += values[k]
        for row, row_values in zip(out, total):   # row by row: a product with the (B x entries) array copies it
            row += matrix @ row_values


def sweep_parts(prob):
    """Indices into ``derivative_pattern`` of the parts a time-sweep preconditioner keeps: the (implicit)
    force Jacobian, the explicit terms' force Jacobian and the velocity terms' dG/dv parts (their damping)."""
    implicit, explicit = split(prob)
    kept = [0]
    index = 2 if prob.scheme == "linearized" else 1
    if explicit is not None and explicit.terms:
        kept.append(index)
        index += 1
    for group in (implicit, explicit):
        if group is not None and group.velocity_terms:
            kept += [index + 1, index + 2]
            index += 3
    return kept


def derivative_values(prob, q_prev, q_here, q_next, j, offsets=None):
    """Values ``(B, nnz)`` of each part of ``derivative_pattern`` for rows ``j``, in its order.

    With ``offsets`` (a collection of step offsets) only the parts at those offsets are evaluated; the
    others are None.
    """
    h = prob.h
    implicit, explicit = split(prob)
    x, v, t = _force_arguments(prob, q_prev, q_here, q_next, j)
    p_off, v_off = _OFFSETS[prob.scheme]
    want = (lambda o: True) if offsets is None else (lambda o: o in offsets)
    first = 1 if prob.scheme == "linearized" else p_off
    # The models return fresh arrays (concatenations): negated and scaled in place, without temporaries.
    values = [_negated(implicit.jacobian_values(x, t)) if want(first) else None]
    if prob.scheme == "linearized":
        values.append(_negated(implicit.jacobian_derivative(x, t, q_next - q_here)) if want(0) else None)
    if explicit is not None and explicit.terms:
        values.append(_negated(explicit.jacobian_values(x, t)) if want(0) else None)
    for group, k, velocity in ((implicit, v_off, v), (explicit, 0, None)):
        if group is None or not group.velocity_terms:
            continue
        kept = [want(p_off), want(k), want(k - 1)]
        if any(kept):
            velocity = (q_here - q_prev) / h if velocity is None else velocity
            d_dq, d_dv = group.velocity_jacobian_values(x, velocity, t)
            d_dv /= h
            parts = [_negated(d_dq), -d_dv if kept[1] else None, d_dv]
        else:
            parts = [None] * 3
        values += [part if keep else None for part, keep in zip(parts, kept)]
    return values


def _negated(values):
    """``values`` negated in place."""
    return np.negative(values, out=values)


def stable_force_part(prob, q_prev, q_here, q_next, j):
    """Values ``(B, nnz)`` of the first part of ``derivative_values`` (-dF/dq, of the implicit terms for
    "linearized") with the stabilized force Jacobian (``Model.stable_jacobian_values``), or None when its
    terms have none."""
    x, _, t = _force_arguments(prob, q_prev, q_here, q_next, j)
    values = split(prob)[0].stable_jacobian_values(x, t)
    return None if values is None else -values
