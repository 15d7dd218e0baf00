"""Pure questions about a validated trace, shared by the diagnostics and the views (no torch).

``delta``: the two wire formats and the one conversion between them (``expand``: v2 → v1).
``replay``: one pass over a delta trace with the state after each step and what the step changed.
``holding``: who keeps each tensor alive — a variable, or only the autograd graph — kept up to date
step by step, for the memory view and the memory accounting alike.
"""
