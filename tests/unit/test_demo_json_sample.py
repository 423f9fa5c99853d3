"""The demo model's JSON (proxy/demo/json_sample.py) is accepted by the schemas agent frameworks send:
pydantic's own (nested models through `$defs`, optional fields as `anyOf`, enums, lists, dates),
OpenAI's strict form, and plain tool schemas — so a framework's parse of the demo's answer tests the
proxy, not the demo."""

from __future__ import annotations

import datetime as dt
import json
from enum import StrEnum

from pydantic import BaseModel

from proxy.demo.json_sample import answer_for, properties, sample


class Unit(StrEnum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Reading(BaseModel):
    city: str
    temperature: float
    unit: Unit
    taken_at: dt.datetime


class Report(BaseModel):
    title: str
    readings: list[Reading]
    note: str | None = None
    tags: list[str] = []


def test_a_pydantic_schema_gets_a_value_its_model_validates() -> None:
    value = sample(Report.model_json_schema())
    report = Report.model_validate(value)
    assert report.readings and report.readings[0].city == "Paris" and report.readings[0].unit is Unit.celsius


def test_a_strict_schema_gets_every_property() -> None:
    strict = {"type": "object", "additionalProperties": False,
              "properties": {"a": {"type": "string"}, "b": {"type": ["integer", "null"]}}}
    assert properties(strict) == {"a": "demo-a-0", "b": 1}


def test_a_plain_tool_schema_gets_its_required_arguments_as_before() -> None:
    schema = {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
              "required": ["command"]}
    assert properties(schema, "shell") == {"command": "echo hello from the llm-proxy demo"}


def test_a_chat_response_format_gets_json_text() -> None:
    assert json.loads(answer_for({"type": "json_object"}, "Hi there.") or "") == {"answer": "Hi there."}
    wanted = {"type": "json_schema", "json_schema": {"name": "report", "schema": Report.model_json_schema()}}
    Report.model_validate_json(answer_for(wanted, "") or "")
    assert answer_for({"type": "text"}, "x") is None and answer_for(None, "x") is None
