"""JSON Schema of the trace records, so that other languages can write Ember traces.

``python -m ember.schemas.jsonschema`` rewrites ``schemas/json/ember.trace-<v>.schema.json``;
a test fails when the committed file and the models disagree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .records import SCHEMA_ID, SCHEMA_NAME, SCHEMA_VERSION
from .validate import RECORD

__all__ = ["json_schema", "schema_path", "write"]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one trace line (any record kind)."""
    schema = RECORD.json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://ember.dev/schemas/{SCHEMA_NAME}-{SCHEMA_VERSION}.schema.json"
    schema["title"] = f"{SCHEMA_ID} record"
    schema["description"] = (
        "One line of an Ember trace (JSONL). The first line of a file is a 'meta' record."
    )
    return schema


def schema_path() -> Path:
    return Path(__file__).parent / "json" / f"{SCHEMA_NAME}-{SCHEMA_VERSION}.schema.json"


def render() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def write(path: Path | None = None) -> Path:
    path = path or schema_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(), encoding="utf-8")
    return path


if __name__ == "__main__":
    print(write())
