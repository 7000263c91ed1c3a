"""What MindCluster publishes, one module per object, parsed into HardwareFaults. Pure: no I/O."""
