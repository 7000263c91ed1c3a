"""The base of every configuration model and the field types they share."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

PositiveSec = Annotated[float, Field(gt=0)]
Port = Annotated[int, Field(ge=0, le=65535)]


class ConfigModel(BaseModel):
    """Strict (no string-to-number coercion), frozen, and unknown keys refused: a typo fails at start."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
