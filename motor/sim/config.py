"""Command line and typed settings of ``motor-engine-sim`` (one place for every knob)."""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, NoReturn

from motor.sim.ft_state import FtDialect
from motor.sim.placement import PlacementError, slots_per_rank

PROG = "motor-engine-sim"

# The defaults are vLLM's own behaviour (`--ft-dialect vllm --diagnosing-sec 1.5`); the RFC-era
# engine is `--ft-dialect rfc`.
DEFAULT_FT_DIALECT = FtDialect.VLLM
DEFAULT_DIAGNOSING_SEC = 1.5


@dataclass(frozen=True)
class SimConfig:
    dp_rank: int
    dp_size: int
    dp_master_ip: str
    dp_master_port: int
    host: str
    port: int
    ready_file: str | None
    ft_api_prefix: str
    num_experts: int
    num_redundant_experts: int
    per_token_latency_sec: float
    collective_timeout_sec: float
    engine_recovery_timeout_sec: float
    enable_fault_tolerance: bool
    ft_dialect: FtDialect
    diagnosing_sec: float
    scale_down_checkin_sec: float
    idle_step_interval_sec: float
    model_load_sec: float
    model: str
    enable_fault_injection: bool
    dp_init_timeout_sec: float
    wave_poll_interval_sec: float
    max_tokens_limit: int
    log_level: str
    # "test" (tests, demos) or "production" (a deployment using this engine): fault injection is
    # refused in production mode.
    mode: str = "test"
    # Append one JSON line per apply received (what the engine was sent, kept across restarts).
    apply_journal: str | None = None
    # --ft-dialect sglang: host:port of the instance FT manager (motor.sim.instance_ft) to link to.
    ft_manager_address: str | None = None
    # --join: an added original rank of an elastic scale-up; forms no group at start and serves
    # nothing until a scale_up round that names it commits (--dp-master-ip/--dp-master-port unused).
    join: bool = False
    # --executor-zygote: fork the executor from this zygote (motor.sim.zygote) instead of spawning it.
    executor_zygote: str | None = None

    @property
    def slots_per_rank(self) -> int:
        return slots_per_rank(self.num_experts, self.num_redundant_experts, self.dp_size)

    @property
    def gloo_host(self) -> str:
        """Address the gloo pairs bind to: the HTTP host when it names one interface."""
        try:
            addr = ipaddress.ip_address(self.host)
        except ValueError:
            return ""
        return "" if addr.is_unspecified else self.host

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _OneLineParser(argparse.ArgumentParser):
    """Bad values are refused with one line naming the flag and value, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_in(lo: int, hi: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise argparse.ArgumentTypeError(f"{value} is not {bound}")
        return value

    return parse


def _seconds(minimum: float, *, inclusive: bool):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number of seconds {text!r}") from None
        if not math.isfinite(value) or value < minimum or (not inclusive and value == minimum):
            op = ">=" if inclusive else ">"
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds {op} {minimum:g}")
        return value

    return parse


def _ip(text: str) -> str:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address") from None
    return text


def _zygote_address(text: str) -> str:
    # sockaddr_un holds 107 bytes of path (or of an abstract name after its leading NUL).
    if not (text.startswith("@") or text.startswith("/")) or len(text.encode()) > 107 or len(text) < 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not an absolute socket path or an @abstract name "
                                         "of at most 107 bytes")
    return text


def _host(text: str) -> str:
    if not text or any(ch.isspace() for ch in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a host name or IP address")
    return text


def _prefix(text: str) -> str:
    if not text.startswith("/") or text.endswith("/") or any(ch.isspace() for ch in text) or "//" in text:
        raise argparse.ArgumentTypeError(f"{text!r} must start with '/', not end with '/' and contain no spaces")
    return text


def _dialect(text: str) -> FtDialect:
    try:
        return FtDialect(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of: {', '.join(FtDialect)}") from None


def _model(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is blank")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(
        prog=PROG,
        allow_abbrev=False,
        description="Reference engine: one vLLM data-parallel rank (external LB) with fault tolerance, "
        "EPLB and redundant experts, over a real torch gloo DP group.",
    )
    g = p.add_argument_group("data parallel")
    g.add_argument("--dp-rank", type=_int_in(0), default=0, help="global (original) DP rank of this process")
    g.add_argument("--dp-size", type=_int_in(1), default=1, help="number of DP ranks in the initial group")
    g.add_argument("--dp-master-ip", type=_ip, default="127.0.0.1", help="IP of the initial group's TCPStore (rank 0 binds it)")
    g.add_argument("--dp-master-port", type=_int_in(0, 65535), default=29500, help="port of the initial group's TCPStore (0 only with --dp-size 1)")
    g.add_argument("--dp-init-timeout-sec", type=_seconds(0, inclusive=False), default=600.0, help="bound on forming the initial DP group")
    g.add_argument("--collective-timeout-sec", type=_seconds(0, inclusive=False), default=30.0, help="a collective that takes longer fails (peer hung)")
    g.add_argument("--join", action="store_true",
                   help="start as a joiner of an elastic scale-up: form no group (--dp-master-ip/--dp-master-port "
                        "are ignored), answer /health and the FT status as healthy, refuse inference until a "
                        "scale_up apply naming --dp-rank commits; --dp-size is the original DP size")
    g.add_argument("--wave-poll-interval-sec", type=_seconds(0, inclusive=False), default=0.02, help="how often an idle rank checks the store for a peer's new wave")
    h = p.add_argument_group("serving")
    h.add_argument("--host", type=_host, default="127.0.0.1", help="HTTP bind address")
    h.add_argument("--port", type=_int_in(0, 65535), default=8000, help="HTTP port (0: any free port, see --ready-file)")
    h.add_argument("--ready-file", default=None, help='written atomically once serving: {"port": ..., "pid": ...}')
    h.add_argument("--model", type=_model, default="motor-sim", help="served model name")
    h.add_argument("--model-load-sec", type=_seconds(0, inclusive=True), default=0.0, help="start-up cost standing in for weight loading")
    h.add_argument("--per-token-latency-sec", type=_seconds(0, inclusive=True), default=0.01, help="time of one decode step")
    h.add_argument("--max-tokens-limit", type=_int_in(1), default=8192, help="largest max_tokens a request may ask for")
    e = p.add_argument_group("experts")
    e.add_argument("--num-experts", type=_int_in(1), default=8, help="logical experts")
    e.add_argument("--num-redundant-experts", type=_int_in(0), default=0, help="extra physical expert slots (EPLB redundancy)")
    f = p.add_argument_group("fault tolerance")
    f.add_argument("--enable-fault-tolerance", action="store_true", help="serve the FT API")
    f.add_argument("--ft-api-prefix", type=_prefix, default="/v1/fault_tolerance", help="FT API route prefix")
    f.add_argument("--engine-recovery-timeout-sec", type=_seconds(0, inclusive=False), default=120.0, help="bound on one apply (peers must join within it)")
    f.add_argument("--ft-dialect", type=_dialect, metavar="{vllm,rfc,sglang}", default=DEFAULT_FT_DIALECT,
                   help="status dialect: vllm (no ft_state, entry replaced on every change), rfc (ft_state "
                        "recovering/failed) or sglang (the rfc machine behind an instance FT manager)")
    f.add_argument("--ft-manager-address", metavar="HOST:PORT", default=None,
                   help="--ft-dialect sglang: the instance FT manager (python -m motor.sim.instance_ft) to link to")
    f.add_argument("--diagnosing-sec", type=_seconds(0, inclusive=True), default=DEFAULT_DIAGNOSING_SEC,
                   help="how long a fault shows as 'diagnosing' before 'unhealthy' (0: no diagnosing phase)")
    f.add_argument("--scale-down-checkin-sec", type=_seconds(0, inclusive=False), default=10.0,
                   help="vllm dialect: every survivor must check in to a round within this window, else the round fails")
    f.add_argument("--idle-step-interval-sec", type=_seconds(0, inclusive=False), default=0.02,
                   help="vllm dialect: after a committed scale_down an idle rank runs a dummy step this often")
    f.add_argument("--enable-fault-injection", action="store_true", help="serve /motor/admin/* (tests and demos only)")
    f.add_argument("--mode", choices=["test", "production"], default=os.environ.get("MOTOR_ENGINE_MODE", "test"),
                   help="production refuses --enable-fault-injection (default: $MOTOR_ENGINE_MODE or test)")
    p.add_argument("--executor-zygote", metavar="ADDRESS", type=_zygote_address, default=None,
                   help="fork the executor from the zygote serving this Unix socket (@name: abstract; "
                        "`python -m motor.sim.zygote`) instead of spawning it")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], default="INFO")
    p.add_argument("--apply-journal", metavar="PATH", default=None,
                   help="append one JSON line per apply received (tests count what the engines were sent)")
    return p


def injection_refusal(cfg: SimConfig) -> str | None:
    """Why the admin (fault injection) routes may not be served with this config, or None."""
    if not cfg.enable_fault_injection:
        return None
    if cfg.mode != "test":
        return f"--enable-fault-injection is refused with --mode {cfg.mode}: fault injection is for tests and demos"
    try:
        addr = ipaddress.ip_address(cfg.host)
    except ValueError:
        addr = None
    if addr is None or addr.is_unspecified:
        return (f"--enable-fault-injection needs --host to be the pod's own address (one interface's IP), "
                f"not {cfg.host!r}")
    return None


def parse_config(argv: Sequence[str] | None = None) -> SimConfig:
    parser = build_parser()
    ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if ns.dp_rank >= ns.dp_size:
        parser.error(f"--dp-rank {ns.dp_rank} must be less than --dp-size {ns.dp_size}")
    if ns.join:
        if ns.dp_size < 2:
            parser.error(f"--join needs --dp-size >= 2 (the original DP size), got {ns.dp_size}")
        if not ns.enable_fault_tolerance:
            parser.error("--join needs --enable-fault-tolerance (the scale_up apply that admits the rank)")
        if ns.ft_dialect is FtDialect.SGLANG:
            parser.error("--join is refused with --ft-dialect sglang: SGLang's instance manager has no scale_up")
    elif ns.dp_master_port == 0 and ns.dp_size > 1:
        parser.error(f"--dp-master-port 0 is only allowed with --dp-size 1 (got --dp-size {ns.dp_size})")
    try:
        slots_per_rank(ns.num_experts, ns.num_redundant_experts, ns.dp_size)
    except PlacementError:
        parser.error(
            f"--num-experts {ns.num_experts} + --num-redundant-experts {ns.num_redundant_experts} = "
            f"{ns.num_experts + ns.num_redundant_experts} physical experts is not divisible by --dp-size {ns.dp_size}"
        )
    if (ns.ft_dialect is FtDialect.SGLANG) != (ns.ft_manager_address is not None):
        parser.error("--ft-manager-address is needed with --ft-dialect sglang, and only then")
    if ns.ready_file is not None:
        if not ns.ready_file.strip():
            parser.error(f"--ready-file {ns.ready_file!r} is blank")
        if not os.path.isdir(os.path.dirname(os.path.abspath(ns.ready_file))):
            parser.error(f"--ready-file {ns.ready_file!r}: directory does not exist")
    cfg = SimConfig(
        dp_rank=ns.dp_rank,
        dp_size=ns.dp_size,
        dp_master_ip=ns.dp_master_ip,
        dp_master_port=ns.dp_master_port,
        host=ns.host,
        port=ns.port,
        ready_file=ns.ready_file,
        ft_api_prefix=ns.ft_api_prefix,
        num_experts=ns.num_experts,
        num_redundant_experts=ns.num_redundant_experts,
        per_token_latency_sec=ns.per_token_latency_sec,
        collective_timeout_sec=ns.collective_timeout_sec,
        engine_recovery_timeout_sec=ns.engine_recovery_timeout_sec,
        enable_fault_tolerance=ns.enable_fault_tolerance,
        ft_dialect=ns.ft_dialect,
        diagnosing_sec=ns.diagnosing_sec,
        scale_down_checkin_sec=ns.scale_down_checkin_sec,
        idle_step_interval_sec=ns.idle_step_interval_sec,
        model_load_sec=ns.model_load_sec,
        model=ns.model,
        enable_fault_injection=ns.enable_fault_injection,
        dp_init_timeout_sec=ns.dp_init_timeout_sec,
        wave_poll_interval_sec=ns.wave_poll_interval_sec,
        max_tokens_limit=ns.max_tokens_limit,
        log_level=ns.log_level,
        mode=ns.mode,
        apply_journal=ns.apply_journal,
        ft_manager_address=ns.ft_manager_address,
        join=ns.join,
        executor_zygote=ns.executor_zygote,
    )
    refusal = injection_refusal(cfg)
    if refusal is not None:
        parser.error(refusal)
    return cfg
