"""The physics of a loop: time schemes, residual forces, forward simulation, force models, scenes as records."""
