from __future__ import annotations

import pytest

from motor.sim.config import parse_config

pytestmark = pytest.mark.timeout(30)  # per test, module fixtures included

BASE = ["--dp-size", "4", "--dp-rank", "1", "--num-experts", "4", "--num-redundant-experts", "4"]


def test_defaults_and_values() -> None:
    cfg = parse_config(BASE + ["--port", "0", "--host", "127.0.0.3", "--enable-fault-tolerance"])
    assert (cfg.dp_rank, cfg.dp_size, cfg.port, cfg.slots_per_rank) == (1, 4, 0, 2)
    assert cfg.ft_api_prefix == "/v1/fault_tolerance"
    assert cfg.engine_recovery_timeout_sec == 120.0
    assert cfg.model_load_sec == 0.0
    assert cfg.enable_fault_tolerance and not cfg.enable_fault_injection
    assert cfg.gloo_host == "127.0.0.3"
    assert parse_config(["--host", "0.0.0.0"]).gloo_host == ""


@pytest.mark.parametrize(
    "args, named",
    [
        (["--dp-rank", "x"], "argument --dp-rank: invalid integer 'x'"),
        (["--dp-rank", "-1"], "argument --dp-rank: -1 is not >= 0"),
        (["--dp-size", "0"], "argument --dp-size: 0 is not >= 1"),
        (["--dp-size", "2", "--dp-rank", "2"], "--dp-rank 2 must be less than --dp-size 2"),
        (["--port", "70000"], "argument --port: 70000 is not in [0, 65535]"),
        (["--dp-master-ip", "localhost"], "argument --dp-master-ip: 'localhost' is not an IP address"),
        (["--dp-size", "2", "--dp-master-port", "0"], "--dp-master-port 0 is only allowed with --dp-size 1"),
        (["--per-token-latency-sec", "-0.1"], "argument --per-token-latency-sec: '-0.1' is not a finite number"),
        (["--collective-timeout-sec", "0"], "argument --collective-timeout-sec: '0' is not a finite number of seconds > 0"),
        (["--engine-recovery-timeout-sec", "nan"], "argument --engine-recovery-timeout-sec: 'nan'"),
        (["--model-load-sec", "abc"], "argument --model-load-sec: invalid number of seconds 'abc'"),
        (["--ft-api-prefix", "v1/ft"], "argument --ft-api-prefix: 'v1/ft' must start with '/'"),
        (["--ft-api-prefix", "/v1/ft/"], "argument --ft-api-prefix: '/v1/ft/'"),
        (["--num-experts", "0"], "argument --num-experts: 0 is not >= 1"),
        (["--dp-size", "4", "--num-experts", "8", "--num-redundant-experts", "3"],
         "--num-experts 8 + --num-redundant-experts 3 = 11 physical experts is not divisible by --dp-size 4"),
        (["--model", " "], "argument --model: ' ' is blank"),
        (["--ready-file", "/nonexistent-dir/x.json"], "--ready-file '/nonexistent-dir/x.json': directory does not exist"),
        (["--log-level", "LOUD"], "argument --log-level: invalid choice: 'LOUD'"),
        (["--executor-zygote", "zygote.sock"], "argument --executor-zygote: 'zygote.sock' is not an absolute socket path"),
        (["--executor-zygote", "@" + "z" * 107], "of at most 107 bytes"),
        (["--dp-ran", "1"], "unrecognized arguments: --dp-ran"),
    ],
)
def test_bad_values_exit_2_with_one_line(args: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_config(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("motor-engine-sim: error: "), err
    assert named in err, err
