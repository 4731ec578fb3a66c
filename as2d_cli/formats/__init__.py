"""Stored file formats: traces, cost profiles, deployments and results.

Every stored schema's name and version are in ``registry.py`` (one table: the versions read,
the owning module, the JSON Schema, the docs section); each format's module takes its
``SCHEMA`` and ``VERSION`` from it. JSON Schemas ship under ``as2d_cli/formats/schemas/``;
``docs/formats.md`` documents every field.
"""
