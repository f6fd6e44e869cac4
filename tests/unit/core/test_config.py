"""What a stage's params record (core.config.recorded): Snakemake reruns a finished job
whose recorded params changed."""

from __future__ import annotations

from shardflow.core.config import NEUTRAL_ADDED_KEYS, load_schema, recorded
from tests.helpers import REPO


def test_neutral_added_keys_are_left_out_of_the_recorded_params_at_their_neutral_value_only():
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    assert NEUTRAL_ADDED_KEYS
    for (section, key), value in NEUTRAL_ADDED_KEYS.items():
        # The schema fills the default into every config: it must be the neutral value,
        # or an upgrade would record the key after all.
        assert schema["properties"][section]["properties"][key]["default"] == value
        assert recorded(section, {key: value, "window": 8}) == {"window": 8}
        assert recorded(section, {key: "on", "window": 8}) == {key: "on", "window": 8}
        assert recorded("another", {key: value}) == {key: value}  # another section's key of that name


def test_untracked_keys_are_never_recorded():
    assert recorded("embedding", {"compile_cache": "/c", "window": 8}) == {"window": 8}
    assert recorded("train", {"compile_cache": None, "lr": 0.1}) == {"lr": 0.1}


def test_every_schema_property_holds_schema_keywords_only():
    """An unquoted comma in a flow-style description (`{..., description: a, b.}`) makes YAML
    end the description there and read ` b.` as another key: the description is cut short
    and a stray key sits in the schema, unnoticed by jsonschema."""
    keywords = {
        "type", "description", "default", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "minLength", "maxLength", "pattern", "items", "minItems", "maxItems", "uniqueItems",
        "properties", "additionalProperties", "required", "oneOf", "anyOf", "allOf", "not", "propertyNames", "$ref",
        "$defs",
    }
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    stray = []

    def walk(node: dict, path: str) -> None:
        for name, sub in (node.get("properties") or {}).items():
            stray.extend(f"{path}{name}: {key!r}" for key in sub if key not in keywords)
            walk(sub, f"{path}{name}.")
        for branch in (*node.get("oneOf", []), *node.get("anyOf", [])):
            walk(branch, path)

    walk(schema, "")
    assert not stray, stray
