"""Request energy from Perfetto battery counters (paper D.6.1).

capture_config builds the TraceConfig the phone's `perfetto` reads; trace_reader decodes
battery samples from a trace; episode_records reads what the on-device episode wrote;
analysis integrates E = ∫ I·V dt per request; refusals rejects impossible figures;
results stores versioned tables next to the raw trace; protocol runs the unplugged flow.
"""
