"""Sustained streaming (paper D.6.2): a recording paced in non-overlapping blocks through a
resident runner. :mod:`clock` (real or virtual time), :mod:`pacer` (the blocks, their
arrival and context epochs), :mod:`source` (the resident source worker's epochs),
:mod:`loop` (the serial target path over every block). docs/streaming.md describes it."""
