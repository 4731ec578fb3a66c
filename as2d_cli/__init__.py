"""as2d: target-decoupled speculative decoding for audio language models, measured on phones.

The core modules are a library: they never import typer, rich or call sys.exit.
The command line lives in :mod:`as2d_cli.cli` and only renders what the core returns.
"""

__version__ = "0.1.0"
