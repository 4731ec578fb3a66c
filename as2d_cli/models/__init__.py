"""The bundled speech models run with ONNX Runtime: loading, features, target, drafter, sources."""
