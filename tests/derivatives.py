"""Finite-difference checks shared by the derivative tests."""
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
