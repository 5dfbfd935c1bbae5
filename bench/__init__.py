"""Benchmarks: this client against go-liftbridge and gufo-liftbridge on one server, one run.

Run with ``python -m bench`` (``--quick`` for a run under a minute). See docs/benchmarks.md.
"""
