"""The native runner: real models, real time, the same engine as the replay.

``python -m native.runner`` speaks JSON lines (commands in, events out); see
docs/runner-protocol.md. :mod:`native.host` launches it locally or on a device.
"""
