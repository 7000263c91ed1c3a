"""docs/configuration.md is what scripts/gen_config_docs.py renders from the services' models now,
and every key of every service is documented (a type, a default and a description)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "gen_config_docs.py"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_docs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_configuration_doc_is_current(gen: ModuleType) -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == gen.render(), "docs/configuration.md is stale: run python scripts/gen_config_docs.py"


def test_rendering_is_deterministic(gen: ModuleType) -> None:
    assert gen.render() == gen.render()


@pytest.mark.parametrize("key", [
    "`fault_tolerance_config.dp_scale_down_config.execution_deadline_sec` | number | `30.0` | (0, 1675] |",
    "`server.port` | integer | `0` | [0, 65535] |",
    "`leader_election.lease_ttl_sec` | integer | `5` | [2, 300] |",
    "`migration.withdrawn_stall_sec` | number | `2.0` | (0, 600] |",
    "`engines[].dp_rank` | integer | **required** | ≥ 0 |",
    "`engines[].device_infos[].device_id` | string | **required** |",
    "`security.cert_file` | file path | **required** |",
    "`hardware_monitor.kubernetes` | one of `\"auto\"`, `\"off\"`, `\"on\"` | `\"auto\"` |",
])
def test_every_service_key_is_listed_with_type_default_and_range(gen: ModuleType, key: str) -> None:
    assert key in gen.render()


def test_a_key_without_a_description_is_refused(gen: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import BaseModel

    class Undocumented(BaseModel):
        plain: int = 1

    monkeypatch.setattr(gen, "SERVICES", (("motor-test", Undocumented),))
    with pytest.raises(ValueError, match="Undocumented: plain"):
        gen.render()


def test_check_mode_names_the_fix(gen: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "docs" / "configuration.md"
    stale.parent.mkdir()
    stale.write_text("old\n", encoding="utf-8")
    monkeypatch.setattr(gen, "REPO", tmp_path)
    monkeypatch.setattr(gen, "DOC_PATH", stale)
    assert gen.main(["--check"]) == 1
    assert "docs/configuration.md is stale: run python scripts/gen_config_docs.py" in capsys.readouterr().err
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    assert stale.read_text(encoding="utf-8") == gen.render()
