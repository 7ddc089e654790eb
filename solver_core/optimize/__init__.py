"""The optimizers of a loop: Gauss–Newton, its linear solves, fast projection, the reversible start."""
