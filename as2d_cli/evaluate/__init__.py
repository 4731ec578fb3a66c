"""`as2d eval`: fixed-configuration evaluation (replay) and native runs with agreement."""
