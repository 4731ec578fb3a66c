"""Stored file formats: traces, cost profiles, deployments and results.

Each format lives in its own module with a ``SCHEMA`` name and ``VERSION``; JSON Schemas
ship under ``as2d_cli/formats/schemas/``; ``docs/formats.md`` documents every field.
"""
