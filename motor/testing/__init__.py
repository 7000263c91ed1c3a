"""What tests and benchmarks share: doubles of the NodeManager's peers, bounded waits, artifact
folders. Production code never imports this package (motor.controller, motor.coordinator, motor.sim
and nodemanager stay free of it).

The doubles stand in for the *peers* (engine HTTP API, Controller gRPC), never for the parts under test.

Modules:
  fake_engine      the FT HTTP API of one or many DP ranks in one small aiohttp process, each rank
                   switchable (identity violations, garbage, hangs, apply answers, exit on demand);
                   run as ``python -m motor.testing.fake_engine``
  fake_controller  FakeController, a recording motor.v1.Controller on a real gRPC server (Register,
                   Heartbeat, ReportSoftwareFault, settable NodeManagerFtConfig)
  fake_group       the DP communication domain of the light fake engine's ``--group`` mode: every
                   rank of an instance in one process, the reference engine's FT protocol
                   (diagnosing, vote, rebuild) and fault names without torch, for hundreds of ranks
  fake_group_app   the ``--group`` mode's HTTP app per rank (FT API, OpenAI completions, the
                   reference engine's admin inject route, journal)
  fake_http        routes and signal handling the fake engine's apps share
  nodemanager_host many real NodeManagerServices in one process (one event loop), for fleet-scale
                   benchmarks on a small machine
  waits            the bounded waits: wait_for, async_wait_for, turns_until
  vllm_router      vllm-router (PyPI) as a peer: where `make test` installs it, starting it with no
                   workers, reading its worker list
  artifacts        the per-test artifact folder of the e2e and chaos tiers
"""
