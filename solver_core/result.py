"""One result type and one stop protocol for every phase of the solver, as scipy.optimize has them.

Every phase (fast projection, Gauss–Newton, the initial guess) and ``make_loop`` return a ``Result``: a
dict with attribute access holding ``x`` (the trajectory), ``status`` (one of the codes below),
``success``, ``message``, ``nit`` (iterations), ``history`` (per-iteration dicts: phase, iteration, loss,
...) and ``seconds``, beside the phase's own fields. Every phase reports to one ``callback(info)``
(phase, iteration, loss after each iteration) and stops when it ``halts``.
"""

# status codes, like scipy's OptimizeResult.status
CONVERGED, CONVERGED_WITH_SEAM, ITERATION_CAP, NO_PROGRESS, CANCELLED = range(5)


class Result(dict):
    """A solver phase's outcome: a dict whose keys are also attributes (scipy's OptimizeResult)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    __setattr__ = dict.__setitem__
    __delattr__ = dict.__delitem__

    def __dir__(self):
        return list(self.keys())


def halts(callback, info):
    """True when ``callback(info)`` asks the solver to stop: it returns True or raises StopIteration."""
    if callback is None:
        return False
    try:
        return bool(callback(info))
    except StopIteration:
        return True
