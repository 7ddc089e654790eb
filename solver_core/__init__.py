"""Physical cyclic animations (Jia, Wang, Li, Chern 2023) in numpy/scipy. Never imports bpy."""
from .models.base import ForceTerm, Model, sample_periodic
