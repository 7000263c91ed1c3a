"""Configuration shared by every Motor service: the loader and the types each service's model uses.

Config files are YAML (JSON is a subset). Every model refuses unknown keys and wrong types, so a
service never starts half-configured; `loader.load_config` turns validation errors into one
`ConfigError` line that names each offending key and value. Each service's own model lives in its
package (motor.controller.config, motor.coordinator.config, nodemanager.config); docs/configuration.md
lists every key, generated from those models by scripts/gen_config_docs.py.

Modules:
  loader          file + `--set dotted.key=value` overrides → a validated model, or ConfigError
  base            ConfigModel (strict, frozen, unknown keys refused), PositiveSec, Port
  addresses       host:port parsing and the field validators of hosts and addresses
  listeners       ServerConfig (a gRPC server) and HttpListenConfig (an HTTP server)
  tls             TlsConfig, ClientTlsConfig, SecurityConfig (the one mTLS switch)
  fault_tolerance RFC §7 `fault_tolerance_config` and what derives from it (guard lease, proxy)
  publication     the Controller's serving publishers (the Coordinator, vllm-router processes)
"""
