"""Counting calls in tests: how often a function runs, for cost bounds stated as counts instead of timings."""


def count_calls(monkeypatch, target, name):
    """Replace ``target.name`` (a module's function or a class's method) by a wrapper that records each call;
    returns the list of recorded calls (its length is the count)."""
    calls = []
    real = getattr(target, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, counted)
    return calls
