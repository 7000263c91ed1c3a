"""engine-check names the dialect it detects, checks SGLang's instance FT manager, and probes a
whitespace-only request id and a 409 while busy (recorded answers, no sockets)."""

from __future__ import annotations

from .test_engine_check import Answers, doc, run

SGLANG = doc(*({"id": r, "status": s} for r, s in enumerate(["healthy", "dead", "healthy"])),
             last_ft_request_id="motor-r1", ft_error="scale_down_requires_expected_ranks")


def lines(out: str) -> list[str]:
    return out.splitlines()


def test_each_dialect_is_named_with_the_nodemanager_settings() -> None:
    cases = [
        (doc({"id": 1, "status": "healthy"}), [], "info  dialect: vllm (detected); NodeManager settings: "
                                                  "engine_ft_dialect: vllm (the default)"),
        (doc({"id": 1, "status": "healthy"}), ["--prefix", "/fault_tolerance"], "info  dialect: vllm-0.33 (detected)"),
        (doc({"id": 1, "status": "unhealthy", "ft_state": "recovering"}), [], "info  dialect: rfc (detected)"),
        (SGLANG, [], "info  dialect: sglang (detected); NodeManager settings: engine_ft_dialect: sglang, "
                     "engine_ft_manager_address: this host:port"),
    ]
    for status, argv, expected in cases:
        code, out, _ = run(Answers(status), *argv)
        assert code == 0, out
        assert any(line.startswith(expected) for line in lines(out)), out


def test_sglang_instance_status_conforms_with_its_sticky_error() -> None:
    code, out, _ = run(Answers(SGLANG))
    assert code == 0, out
    assert "ok    statuses: 0=healthy, 1=dead, 2=healthy" in lines(out)
    assert "ok    ft_error (top level, kept until the next apply finishes): scale_down_requires_expected_ranks" \
        in lines(out)
    assert "ok    identity: the ranks 0..2, each once; Motor's NodeManager bridge reads 0: healthy, 1: dead, " \
           "2: healthy" in lines(out)


def test_sglang_status_that_breaks_the_contract_fails() -> None:
    bad = doc(*({"id": r, "status": "diagnosing"} for r in range(3)), ft_error="x", last_ft_request_id="y")
    code, out, _ = run(Answers(bad), "--dialect", "sglang")
    assert code == 1
    assert any(line.startswith("info  dialect: sglang (given)") for line in lines(out))
    assert any(line.startswith("FAIL  status values ['diagnosing', 'diagnosing', 'diagnosing'] are not among")
               for line in lines(out)), out


def test_sglang_probes_see_the_409_while_busy() -> None:
    answers = Answers(SGLANG, apply=(409, {"message": "ft_operation_in_progress"}))
    code, out, _ = run(answers, "--try-retry")
    assert code == 0, out
    posts = [body for method, _, body in answers.calls if method == "POST"]
    assert [p["request_id"][:13] for p in posts] == ["engine-check-", "   ", "engine-check-"]
    assert any("busy, HTTP 409: ft_operation_in_progress; Motor sends again within the deadline" in line
               for line in lines(out))
    assert any(line.startswith("info  a whitespace-only request_id: HTTP 409 (SGLang's request_id is optional)")
               for line in lines(out))
    assert "ok    while an operation runs: HTTP 409: ft_operation_in_progress; Motor sends its apply again within " \
           "the deadline" in lines(out)


def test_vllm_refusing_a_whitespace_request_id_conforms() -> None:
    answers = Answers(doc({"id": 1, "status": "unhealthy"}),
                      apply=(400, {"detail": "request_id must be a non-empty string"}))
    code, out, _ = run(answers, "--try-retry")
    assert code == 0, out
    assert [b["request_id"][:13] for m, _, b in answers.calls if m == "POST"] == ["engine-check-", "   "]
    assert "ok    a whitespace-only request_id is refused (HTTP 400: request_id must be a non-empty string); Motor " \
           "never sends one" in lines(out)
