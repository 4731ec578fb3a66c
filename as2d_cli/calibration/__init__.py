"""`as2d calibrate`: gated probe runs on a device, raw samples kept, a fitted cost profile."""
