"""Fault injection in MindCluster's real formats and as ReportHardwareFault requests (demo, tests)."""
