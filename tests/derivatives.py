"""Finite-difference checks shared by the derivative tests, and the small quad grid they build cloth on."""
import numpy as np


def assembled_jacobians(term, q, t):
    """Dense dF/dq ``(B, 3n, 3n)`` assembled from a term's pattern and values (duplicates summed)."""
    rows, cols = term.jacobian_pattern()
    vals = term.jacobian_values(q, t)
    b, n = q.shape[0], q.shape[1]
    jac = np.zeros((b, 3 * n, 3 * n))
    for k in range(b):
        np.add.at(jac[k], (rows, cols), vals[k])
    return jac


def finite_difference_jacobians(term, q, t, eps=1e-6):
    """Central-difference dF/dq ``(B, 3n, 3n)``, all frames perturbed at once per DOF."""
    b, n = q.shape[0], q.shape[1]
    jac = np.zeros((b, 3 * n, 3 * n))
    for dof in range(3 * n):
        dq = np.zeros_like(q)
        dq[:, dof // 3, dof % 3] = eps
        diff = term.forces(q + dq, t) - term.forces(q - dq, t)
        jac[:, :, dof] = diff.reshape(b, 3 * n) / (2 * eps)
    return jac


def assert_jacobian_matches(term, q, t, eps=1e-6, rtol=1e-5):
    """Assert the term's exact Jacobian equals central differences to ``rtol`` of its largest entry."""
    exact = assembled_jacobians(term, q, t)
    approx = finite_difference_jacobians(term, q, t, eps)
    scale = max(np.abs(exact).max(), 1e-300)
    err = np.abs(exact - approx).max() / scale
    assert err < rtol, f"Jacobian mismatch: max relative error {err:.3e} (rtol {rtol:g})"
    return err


def assert_velocity_jacobian_matches(term, q, v, t, eps=1e-6, rtol=1e-5):
    """Assert a velocity term's dG/dq and dG/dv equal central differences to ``rtol`` of their largest entry."""
    rows, cols = term.jacobian_pattern()
    b, n = q.shape[0], q.shape[1]
    errors = []
    for which, exact_vals in zip(("q", "v"), term.jacobian_values(q, v, t)):
        exact = np.zeros((b, 3 * n, 3 * n))
        approx = np.zeros_like(exact)
        for k in range(b):
            np.add.at(exact[k], (rows, cols), exact_vals[k])
        for dof in range(3 * n):
            d = np.zeros_like(q)
            d[:, dof // 3, dof % 3] = eps
            if which == "q":
                diff = term.forces(q + d, v, t) - term.forces(q - d, v, t)
            else:
                diff = term.forces(q, v + d, t) - term.forces(q, v - d, t)
            approx[:, :, dof] = diff.reshape(b, 3 * n) / (2 * eps)
        err = np.abs(exact - approx).max() / max(np.abs(exact).max(), 1e-300)
        assert err < rtol, f"dG/d{which} mismatch: max relative error {err:.3e} (rtol {rtol:g})"
        errors.append(err)
    return errors


def residual_jacobians(prob, q, eps=1e-6):
    """(assembled, central-difference) residual Jacobians, dense, of ``prob`` at the trajectory ``q`` (active
    rows, free columns)."""
    from solver_core.physics.residual import ResidualJacobian, residual_steps
    jac = ResidualJacobian(prob)
    J = jac.assemble(q).toarray()
    fd = np.zeros_like(J)
    for c, flat in enumerate(jac.free_flat):
        dq = np.zeros(q.size)
        dq[flat] = eps
        up = jac.active_rows(residual_steps(prob, q + dq.reshape(q.shape)))
        down = jac.active_rows(residual_steps(prob, q - dq.reshape(q.shape)))
        fd[:, c] = (up - down) / (2 * eps)
    return J, fd


def quad_grid(nx, ny, size=0.2):
    """Vertices (n, 3) and quads of an nx x ny grid in the xz plane (hanging from its top edge)."""
    x, z = np.meshgrid(np.linspace(0, size * nx, nx + 1), np.linspace(0, -size * ny, ny + 1))
    rest = np.stack([x.ravel(), np.zeros(x.size), z.ravel()], axis=1)
    idx = np.arange(rest.shape[0]).reshape(ny + 1, nx + 1)
    quads = np.stack([idx[:-1, :-1], idx[:-1, 1:], idx[1:, 1:], idx[1:, :-1]], -1).reshape(-1, 4)
    return rest, [tuple(f) for f in quads]


def assert_adjoint_gradient_matches(prob, scale, seed=5, eps=1e-6):
    """The adjoint gradient of the closure mismatch G at random controls of size ``scale`` equals a central
    difference along a random direction (the first control, before the first step, held)."""
    import solver_core as sc
    from solver_core.physics.forward import mismatch, mismatch_gradient
    L = prob.n_steps
    rng = np.random.default_rng(seed)
    u = scale * rng.normal(size=(L + 1, prob.n_vertices, 3))
    q, factors = sc.simulate(prob, L + 2, u, keep_factors=True)
    grad = mismatch_gradient(prob, q, factors)
    du = rng.normal(size=u.shape)
    du[0] = 0.0
    fd = (mismatch(prob, sc.simulate(prob, L + 2, u + eps * du))
          - mismatch(prob, sc.simulate(prob, L + 2, u - eps * du))) / (2 * eps)
    assert abs(fd - np.sum(grad * du)) < 1e-6 * abs(fd)
