"""Capacity restoration: an instance scaled down by fault tolerance gets every original rank back.

  replacement   a recreated pod registering for retired ranks replaces the pod it stands for
  policy        capacity_restore: off | manual | auto, and when auto acts (pure)
  readiness     which retired ranks have a ready place again, and why a restoration waits (pure)
  strategy      RestorationStrategy: pause, bounded in-flight finish, drain, rebuild at full DP, publish
  restorer      RestoreInstance (operator requests, idempotent by request id) and the auto mode
"""
