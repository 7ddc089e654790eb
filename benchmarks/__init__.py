"""Every benchmark and measurement script of Cyclic Loop, run from the repository root with one entry point:

    .venv/bin/python -m benchmarks NAME [options]
    .venv/bin/python -m benchmarks --help            (lists the names)

Each NAME is a module here with a ``main(argv)``. Results, dated with their machine and command, are in
benchmarks/results/. Nothing here ships in the add-on.
"""
