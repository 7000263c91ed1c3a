"""motor-engine-sim, the reference engine: one vLLM DP rank with fault tolerance (see README.md).

Modules:
- API process: `main` (console script), `config` (flags → SimConfig), `engine` (requests, FT status,
  executor events), `engine_rounds` (applies and their rounds, scale_up standby), `http_api` (which
  routes exist), `openai_api` (inference), `ft_api` (FT status/apply),
  `injection` (admin routes) and `injection_state` (armed faults), `executor_client` (the child).
- FT rules, pure: `ft_state` (status entry and its transitions), `apply_body` (apply body and params,
  pydantic), `apply_plan` (what the rules decide from and decide), `apply_rules` (what a rank does
  with a well-formed apply), `scale_up_rules` (re-admitting removed ranks), `placement` (experts).
- Executor process: `executor` (the "EngineCore" loop), `executor_rounds` (leaving the group for a
  scale_up, rebuilding it, the vote), `dp_group` (TCPStore + gloo; imports torch),
  `toy_model` (deterministic tokens from the whole preceding text, toy tokenizer, chat template).
- Helpers: `client` (sync HTTP client), `cluster` (start N ranks locally).
"""
