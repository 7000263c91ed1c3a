"""Fault tolerance of DP instances (RFC §3–§5). Pure modules have no I/O and no clock reads; the
runtime, capability and placement types they share with the rest of the Controller live in
`motor.controller.model`.

Domain (pure):
  evidence         Health, EvidenceKind, RankEvidence, FaultNormalizer (report → original rank)
  context          ScaleDownContext, the frozen input of one round
  decision         decide(): the RFC §4.3 priority decision; FallbackCause
  correlation      HardwareCorrelation: the hardware-first window of RFC §4.4
  gate             evaluate_gate(): the static admission reasons, in order
  topology         plan_round(): survivors per pod, new master, cumulative removed ranks, recyclable pods
  engine_states    how a round judges a survivor's FT status before and after apply; poll cadence
  timeline         Transaction / TimelineBook: typed `motor.v1.TimelineEvent`s per round
  stages           the stages of a transaction read from its timeline (metrics, stage bars)
  evidence_intake  EvidenceIntake: software reports and heartbeats per instance, partial loss
  hardware_intake  HardwareIntake: hardware faults → ranks → forced fallback or correlation

Orchestration:
  strategy_center  StrategyCenter: start, drive, escalate and stop strategies (one per instance)
  snapshot_pull    SnapshotPuller: while a snapshot is incomplete, every active rank's status read
                   directly (bounded), fed through the evidence intake
  idle_probe       IdleProbe (opt-in): a DEAD rank with HEALTHY survivors gets one canary request at a
                   time through the Coordinator, so the survivors' collective fails and the round runs
  running          RunningStrategies: which strategy runs on each instance (the centre writes it)
  fault_manager    FaultManager: the Controller's entry point building intake, decision and centre

Executors (package `strategy`):
  base             ControllerDeps, Strategy, Outcome, timed_call, drain and publish shared by both
  dp_scale_down    DpScaleDownStrategy: one scale-down round (RFC §5)
  round_calls      RoundCalls: the NodeManager fan-out of a round (guard, status, apply, finalize, stop_pod)
  reconfiguration  ReconfigurationStrategy: whole-instance reconfiguration (the fallback)
"""
