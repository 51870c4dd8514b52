"""The JSON Schema of a configuration file, generated from the models.

Editors (yaml-language-server and friends) read YAML 1.2, where an unquoted
``yes`` is text, ``30`` a number and ``1.10`` a float, while cronstable reads
every scalar as text and converts it by the field's type.  So the schema is
lenient where the loader is: booleans also accept yes/no/on/off, numbers also
accept numeric text, and text also accepts numbers, booleans and an empty
value.  The loader remains the judge; the schema gives help on hover and
catches unknown keys and wrong shapes while typing.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from cronstable.config.models import ConfigFile, section_keys
from cronstable.config.types import FALSE_WORDS, TRUE_WORDS

_BOOL_WORDS = sorted(
    {w for word in TRUE_WORDS | FALSE_WORDS for w in (word, word.capitalize(), word.upper())}
)


class LenientSchema(GenerateJsonSchema):
    def bool_schema(self, schema: core_schema.BoolSchema) -> JsonSchemaValue:
        return {"anyOf": [{"type": "boolean"}, {"type": "string", "enum": _BOOL_WORDS}]}

    def int_schema(self, schema: core_schema.IntSchema) -> JsonSchemaValue:
        return {
            "anyOf": [
                super().int_schema(schema),
                {"type": "string", "pattern": r"^\s*[-+]?[0-9_]+\s*$"},
            ]
        }

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        numeric = r"^\s*[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?\s*$"
        return {"anyOf": [super().float_schema(schema), {"type": "string", "pattern": numeric}]}

    def str_schema(self, schema: core_schema.StringSchema) -> JsonSchemaValue:
        out = super().str_schema(schema)
        out["type"] = ["string", "number", "boolean", "null"]
        return out

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        """A section left empty (``onFailure:``) means its defaults, as in the loader."""
        out = super().model_schema(schema)
        properties = out.get("properties", {})
        model: type[BaseModel] = schema["cls"]
        for key in section_keys(model):
            prop = properties.get(key)
            if prop is not None and "$ref" in prop:
                rest = {k: v for k, v in prop.items() if k != "$ref"}
                properties[key] = {"anyOf": [{"$ref": prop["$ref"]}, {"type": "null"}], **rest}
        return out


def _without_titles(node: Any) -> Any:
    """pydantic titles every property after its Python name ("Killtimeout"): noise on hover."""
    if isinstance(node, dict):
        return {
            k: _without_titles(v)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node


def config_schema() -> dict[str, Any]:
    schema = ConfigFile.model_json_schema(by_alias=True, schema_generator=LenientSchema)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "cronstable configuration file",
        **_without_titles(schema),
    }


def schema_text() -> str:
    return json.dumps(config_schema(), indent=2, ensure_ascii=False) + "\n"
