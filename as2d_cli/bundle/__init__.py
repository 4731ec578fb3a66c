"""The arm64 runtime bundle: a self-contained CPython + numpy + onnxruntime + runner tree
that an arm64 Android phone runs with its glibc loader invoked explicitly.

Built only from package registries (Debian arm64 packages through a private apt state,
PyPI aarch64 wheels), pruned, packed reproducibly and described by a manifest
(docs/phones.md). Modules: ``recipe`` (what goes in), ``apt``/``wheels`` (fetching),
``assemble`` (layout and pruning), ``manifest``, ``pack``, ``build`` (cache and
orchestration), ``launch`` (the command line on a device), ``qemu`` (running it here),
``deploy`` (pushing it to a phone).
"""
