"""Command-line entry points.

Modules:
  demo          `motor demo`: a local cluster, a steady load, two rounds, their timelines and stage bars
  motorctl      `motorctl`: status, watch, timeline (--follow), instances, inject, hw-fault, certs,
                engine-check
  engine_check  `motorctl engine-check`: an engine's FT API against Motor's contract, line by line
  stage_bar     one transaction's stages as a terminal bar (shared by motorctl and the demo)
"""
