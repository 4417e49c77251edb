"""mig-parted configs: deterministic rendering, and parsing what the GPU Operator ships."""

from __future__ import annotations

import json

import pytest
import yaml

from migctl.core.migparted.apply import resolve
from migctl.core.migparted.config import forget_parsed, parse, render
from migctl.core.model.gpu_config import GpuConfig, config_name
from migctl.errors import InputError

# The shape of the GPU Operator's default-mig-parted-config (all-balanced uses device filters per model).
OPERATOR_CONFIG = """
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - device-filter: ["0x233010DE", "0x233110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  all-balanced:
    - device-filter: ["0x20B010DE", "0x20B110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
    - device-filter: ["0x233010DE", "0x233110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
"""


def test_parse_operator_config_with_device_filters() -> None:
    cfg = parse(OPERATOR_CONFIG, "default-mig-parted-config")
    gpus = [(0, "0x233010DE"), (1, "0x233010DE")]
    got = resolve(cfg, "all-balanced", gpus)
    assert got == {i: GpuConfig.mig({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}) for i in (0, 1)}
    assert resolve(cfg, "all-disabled", gpus) == {0: GpuConfig.disabled(), 1: GpuConfig.disabled()}


def test_device_filter_skips_other_models() -> None:
    cfg = parse(OPERATOR_CONFIG, "cm")
    assert resolve(cfg, "all-1g.10gb", [(0, "0x20B010DE")]) == {}


def test_unknown_config_name_is_an_input_error() -> None:
    cfg = parse(OPERATOR_CONFIG, "cm")
    with pytest.raises(InputError, match=r"mig-configs\.custom-x: no such config"):
        resolve(cfg, "custom-x", [(0, None)])


EIGHT_GPU_NODE = {
    0: GpuConfig.mig({"3g.40gb": 2}),
    1: GpuConfig.mig({"3g.40gb": 2}),
    2: GpuConfig.mig({"1g.10gb": 7}),
    3: GpuConfig.mig({"7g.80gb": 1}),
    4: GpuConfig.disabled(),
    5: GpuConfig.mig({"2g.20gb": 1, "1g.10gb": 2, "3g.40gb": 1}),
    6: GpuConfig.mig({"1g.10gb+me": 1, "1g.10gb": 6}),
    7: GpuConfig.disabled(),
}


def test_render_round_trips_mixed_eight_gpu_node() -> None:
    name = config_name(EIGHT_GPU_NODE)
    text = render({name: EIGHT_GPU_NODE}).to_yaml()
    back = parse(text, "rendered")
    assert resolve(back, name, [(i, "0x233010DE") for i in range(8)]) == EIGHT_GPU_NODE
    # identical GPUs share one entry
    assert [e.devices for e in back.mig_configs[name]] == [[0, 1], [2], [3], [4, 7], [5], [6]]


def test_config_name_is_deterministic_and_layout_sensitive() -> None:
    shuffled = dict(reversed(list(EIGHT_GPU_NODE.items())))
    assert config_name(shuffled) == config_name(EIGHT_GPU_NODE)
    other = {**EIGHT_GPU_NODE, 2: GpuConfig.mig({"1g.10gb": 6})}
    assert config_name(other) != config_name(EIGHT_GPU_NODE)
    assert len(config_name(EIGHT_GPU_NODE)) <= 63  # it is a label value


def test_render_keeps_existing_configs() -> None:
    base = parse(OPERATOR_CONFIG, "cm")
    out = render({"migctl-x": {0: GpuConfig.disabled()}}, base=base)
    assert {"all-disabled", "all-balanced", "all-1g.10gb", "migctl-x"} <= set(out.mig_configs)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version: v2\nmig-configs: {}\n", "version"),
        ("mig-configs:\n  a:\n    - {devices: all, mig-enabled: false}\n", "version: required field"),
        ("version: v1\nmig-configs: {}\n", "at least one config"),
        ("version: v1\nmig-configs: [a]\n", "expected a map from config name"),
        ("version: v1\nother: 1\nmig-configs: {}\n", "other: unexpected field"),
        ("version: v1\nmig-configs:\n  a: [\n", "broken YAML"),
    ],
)
def test_a_broken_file_is_rejected_precisely(text: str, expected: str) -> None:
    with pytest.raises(InputError, match=expected) as info:
        parse(text, "my-config.yaml")
    assert "my-config.yaml" in str(info.value)


GOOD = "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n"


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{devices: all, mig-enabled: false, mig-devices: {1g.10gb: 1}}", "mig-devices must be empty"),
        ("{devices: all, mig-enabled: true}", "mig-devices is required"),
        ("{devices: all, mig-enabled: true, mig-devices: {1g10gb: 1}}", "parsed wrong number of fields"),
        ("{devices: all, mig-enabled: true, mig-devices: {}, extra: 1}", "extra: unknown field"),
        ("{devices: all, mig-enabled: 'true', mig-devices: {}}", "a[0].mig-enabled: Input should be a valid boolean"),
        ("{devices: all, mig-enabled: true, mig-devices: {1g.10gb: '2'}}", "Input should be a valid integer"),
        ("{devices: ['0'], mig-enabled: false}", "a[0].devices"),
        ("{devices: all, mig-enabled: true, mig-devices: {1g.10gb: 0}}", "all counts for all MIG profiles are 0"),
        ("{devices: all, mig-enabled: true, mig-devices: {'1g.5gb+.me': 1}}", "attribute begins/ends with a dot"),
        ("not-a-map", "a[0]: expected a map of fields, got str"),
    ],
)
def test_a_broken_config_costs_only_itself(entry: str, expected: str) -> None:
    """mig-parted would reject the whole file; migctl drops the one config, keeps the rest, and says why."""
    cfg = parse(GOOD + f"  a:\n    - {entry}\n", "my-config.yaml")
    assert set(cfg.mig_configs) == {"all-disabled"}
    (why,) = cfg.skipped
    assert why.startswith("mig-configs.a") and expected in why and why.endswith("config skipped")
    with pytest.raises(InputError, match=r"mig-configs\.a.*the config is unreadable"):
        resolve(cfg, "a", [(0, None)])


def test_parsed_configs_are_cached_by_text_and_errors_are_not() -> None:
    """The controller re-reads an unchanged ConfigMap every cycle: the same text is parsed once."""
    forget_parsed()
    first = parse(OPERATOR_CONFIG, "cm")
    assert parse(OPERATOR_CONFIG, "cm") is first
    assert parse(OPERATOR_CONFIG + "\n", "cm") is not first  # another text is parsed anew
    forget_parsed()
    assert parse(OPERATOR_CONFIG, "cm") is not first
    broken = "version: v1\nmig-configs:\n  a: [\n"
    for _ in range(2):  # a failed parse raises every time, with its source named
        with pytest.raises(InputError, match="broken YAML"):
            parse(broken, "cm")


def test_rendering_writes_no_filter_when_none_is_given() -> None:
    """An unchanged rendering keeps existing ConfigMaps byte-identical (no rewrite after an upgrade); the form is
    JSON (which is YAML), one named config per line."""
    text = render({"x": {0: GpuConfig.mig({"1g.10gb": 2}), 1: GpuConfig.disabled()}}).to_yaml()
    assert text == (
        '{"version": "v1", "mig-configs": {\n'
        '  "x": [{"devices": [0], "mig-enabled": true, "mig-devices": {"1g.10gb": 2}}, '
        '{"devices": [1], "mig-enabled": false}]\n'
        "}}\n"
    )


def test_json_and_yaml_forms_of_one_config_read_the_same() -> None:
    """The JSON fast path reads what the YAML reader reads, and text that only looks like JSON falls back."""
    cfg = render({"x": EIGHT_GPU_NODE})
    as_json = cfg.to_yaml()
    as_yaml = yaml.safe_dump(json.loads(as_json), sort_keys=False)
    assert parse(as_json, "json") == parse(as_yaml, "yaml") == cfg
    flow = "{version: v1, mig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: 7}}]}}"
    assert list(parse(flow, "flow").mig_configs) == ["a"]


@pytest.mark.parametrize("other", ["1", "1.0", '"true"'])
def test_a_json_entry_equal_to_a_valid_one_is_still_validated_as_itself(other: str) -> None:
    """Entries spelled alike are validated once; `true == 1 == 1.0` in Python, but not to mig-parted's reader
    (strict types): an entry written `1` is refused even after one written `true` was read."""
    a, b = ('{"devices": [0], "mig-enabled": ' + v + ', "mig-devices": {"1g.10gb": 7}}' for v in ("true", other))
    text = '{"version": "v1", "mig-configs": {"a": [' + a + '], "b": [' + b + "]}}"
    cfg = parse(text, "typed")
    assert list(cfg.mig_configs) == ["a"]
    assert len(cfg.skipped) == 1 and cfg.skipped[0].startswith("mig-configs.b[0]")


def test_json_config_nested_too_deep_is_refused() -> None:
    deep = '{"version": "v1", "mig-configs": {"a": [{"devices": ' + "[" * 40 + "]" * 40 + "}]}}"
    with pytest.raises(InputError, match="nested deeper than"):
        parse(deep, "deep")
