"""A seeded, deterministic, virtual-time simulation of the control plane (`python -m motor.simulation`)."""
