"""The methods' default settings, as literals in one place. Import them from
:mod:`as2d_cli.engine.methods` (the methods' owner); only the policies, which that module
builds on, import them from here."""

SD_WIDTHS = (5, 6, 7, 8)  # standard SD is summarised over these physical widths
DEFAULT_SD_K = 8  # one native SD request's physical width
DEFAULT_BUDGET = 7  # As²d's proposal budget b (physical K <= b + 1)
DEFAULT_THRESHOLD = 0.4  # confidence stop (ASP, and As²d where the source has confidences)
DEFAULT_ASP_CAP = 24  # ASP's proposal cap
DEFAULT_BATCH = 8  # an autoregressive source's publication batch
DEFAULT_ALIGN_WINDOW = 8  # alignment search bound ahead of a mismatch
DEFAULT_ALIGN_LOOKBACK = 8  # retired positions the alignment may return to (alignment.py, rule 4)
DEFAULT_SOURCE = "drafter"  # a native target-decoupled request's source (the pair's drafter)
DEFAULT_ALIGN = "suffix"  # alignment rules: "paper" (C.3 + look-back) or "suffix" (alignment.py)
ALIGN_MODES = ("paper", "suffix")
