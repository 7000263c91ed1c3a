"""Recovery strategies: the side-effecting executors (see the module map of fault_tolerance)."""
