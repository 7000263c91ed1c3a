"""The command line: the summary line, the exit status, and the same findings with workers."""

from __future__ import annotations

import pytest

from motor.simulation import __main__ as cli


def _summary(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.strip().splitlines()


def test_a_clean_range_ends_with_the_summary_line_and_status_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--seeds", "3", "--seed", "5", "--no-shrink"]) == 0
    lines = _summary(capsys)
    assert lines[0] == "seeds 5..7 (vllm, 120 steps)"
    assert lines[-1].startswith("3 seeds, ") and lines[-1].endswith(" schedules/s, 0 violations")


def test_workers_report_the_same_lines_as_one_process(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["--seeds", "4", "--seed", "10", "--dialect", "rfc"])
    alone = _summary(capsys)
    cli.main(["--seeds", "4", "--seed", "10", "--dialect", "rfc", "--jobs", "2"])
    pooled = _summary(capsys)
    assert alone[:-1] == pooled[:-1]  # all but the rate


def test_jobs_below_one_is_refused_with_its_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--jobs", "0"])
    assert exc.value.code == 2
    assert "--jobs 0 must be at least 1" in capsys.readouterr().err
