"""JSON Schemas of the stored formats (package data; see docs/formats.md)."""
