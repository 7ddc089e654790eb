"""The solver package: ``solver_core`` next to this package inside the extension, or top level in a checkout."""
try:
    from .. import solver_core as sc
except ImportError:
    import solver_core as sc

__all__ = ["sc"]
