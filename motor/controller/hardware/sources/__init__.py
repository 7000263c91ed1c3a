"""Where hardware faults come from: the RPC, mounted ConfigMaps, Kubernetes list+watch. I/O lives here."""
