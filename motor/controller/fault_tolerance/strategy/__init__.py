"""Recovery strategies, the side-effecting executors: `base` (ControllerDeps, Strategy, Outcome,
timed_call, drain, publish), `dp_scale_down` (one scale-down round), `round_calls` (its NodeManager
fan-out) and `reconfiguration` (the whole-instance fallback)."""
