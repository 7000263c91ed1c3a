"""The Controller's shared domain types, imported by every layer above them and importing none of
ours (pure: no I/O, no clock reads).

  runtime     FtPhase, the one transition function, FtRuntime and FtRuntimeStore, can_serve, the
              fallback strategy's name
  capability  Capability: the FtCapability every pod of an instance agreed on
  placement   EndpointInfo and PodInfo: where each original DP rank lives
"""
