"""`as2d stream` on the host: the recording (:mod:`recording`), the metrics of paper D.6.2
(:mod:`metrics`, a pure function of per-block timings), the run (:mod:`run`), its files
(:mod:`results`) and Figure 9's panels (:mod:`plot`). The runner's side is
:mod:`native.stream_loop` and its neighbours (``native/stream_*.py``)."""
