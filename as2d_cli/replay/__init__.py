"""Discrete-event replay of every method on phone cost profiles (paper A.3, D.1.3, D.2, D.4).

* :mod:`~as2d_cli.replay.pricing`   — integer-ns op prices from a cost profile.
* :mod:`~as2d_cli.replay.producer`  — a target-decoupled source's own timeline.
* :mod:`~as2d_cli.replay.driver`    — one window under one configuration (D, V, O, H).
* :mod:`~as2d_cli.replay.run`       — method runners, pooled TPS, slowdown counts.
* :mod:`~as2d_cli.replay.sweep`     — source × budget catalog sweeps over processes.
* :mod:`~as2d_cli.replay.selection` — fixed-configuration selection and the oracle.
* :mod:`~as2d_cli.replay.report`    — file-level entry points and JSON reports for the CLI.

See ``docs/replay.md``.
"""
