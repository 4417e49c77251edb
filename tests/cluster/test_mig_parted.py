"""NVIDIA's real `nvidia-mig-parted assert --valid-config` (v0.10.0, built by hack/testbin.sh) as the oracle.

* every valid layout of every catalog model, rendered as migctl renders it, passes;
* migctl's reader agrees with mig-parted on the name grammar and the type strictness (v0.10.0's rules);
* the check fails on broken configs, and the session-wide audit of the ConfigMaps migctl writes
  (conftest.MigPartedAudit) reports a broken one.

SKIPPED: configs holding `+me.all` or `-me` names, which v0.10.0 predates (mig_parted_check.PREDATES). Each test
that meets one says how many it skipped; nothing else is skipped.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from migctl.core.hardware.catalog import Catalog, load_catalog
from migctl.core.hardware.geometry import enumerate_layouts
from migctl.core.migparted.config import parse, render
from migctl.core.model.gpu_config import GpuConfig, config_name
from migctl.core.text.migparted_rules import name_problem

from .conftest import MigPartedAudit
from .mig_parted_check import PREDATES, MigPartedCheck

pytestmark = pytest.mark.cluster
V0_10 = (0, 10, 0)
FIXTURE = "migctl/sim/data/gpu-operator-a22dbf6-default-mig-parted-config.yaml"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def test_every_valid_layout_of_every_model_passes_nvidia_check(mig_parted: MigPartedCheck, catalog: Catalog) -> None:
    total = skipped = 0
    for model in catalog.models:
        nodes = {}
        for layout in enumerate_layouts(model):
            node = {0: GpuConfig.mig(layout), 1: GpuConfig.disabled()}
            nodes[config_name(node)] = node
        text = render(nodes).to_yaml()
        verdict = mig_parted.check(text)
        assert verdict.ok, f"{model.id}: {verdict.output}"
        assert all(any(s in n for s in PREDATES) for names in verdict.skipped.values() for n in names)
        total += len(nodes)
        skipped += len(verdict.skipped)
        assert len(verdict.checked) + len(verdict.skipped) == len(nodes)
    print(f"\n{total} layouts checked by nvidia-mig-parted v0.10.0; SKIPPED {skipped} holding +me.all/-me")
    assert total > 1000 and skipped < total


def test_nvidia_published_config_passes_both_readers(mig_parted: MigPartedCheck) -> None:
    with open(FIXTURE, encoding="utf-8") as f:
        text = f.read()
    verdict = mig_parted.check(text, "all-balanced")
    assert verdict.ok, verdict.output
    print(f"\nSKIPPED {len(verdict.skipped)} configs of NVIDIA's file holding +me.all/-me: {sorted(verdict.skipped)}")
    read = parse(text, FIXTURE, V0_10)
    assert set(read.mig_configs) == set(verdict.checked)  # migctl drops exactly the configs v0.10.0 cannot read
    assert {s.split(":")[0].split("[")[0].removeprefix("mig-configs.") for s in read.skipped} == set(verdict.skipped)


NAMES = [
    "1g.10gb", "1g.10gb+me", "1c.3g.40gb", "7g.80gb", "1g.5gb+ME", "1g.05gb", "0g.0gb", "1g.5gb+me,gfx",
    "1g.5gb+gfx", "1g.24gb+me.all", "1g.24gb-me", "1g.24gb-me,gfx", "1g.5gb+.me", "1g.5gb+me.", "1g.5gb+me,me",
    "1g.5gb+", "1g.5gb+1me", "1g .5gb", "1g.5gb ", "1g.5GB", "3g40gb", "1g.5gb.x", "1c.1g.5.5gb", "+1g.5gb",
    "1g.5gb+me-x", "1g.5gb+m_e", "1g.5gb+,me", "2c.1g.10gb", "1g.-5gb", "99999999999999999999g.1gb", "g.5gb",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_name_grammar_is_mig_parted_v0_10_0s(mig_parted: MigPartedCheck, name: str) -> None:
    text = (
        f'version: v1\nmig-configs:\n  x:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {{"{name}": 1}}\n'
    )
    code, output = mig_parted.run(text, "x")
    assert (code == 0) == (name_problem(name, V0_10) is None), output
    assert (code == 0) == ("x" in parse(text, "t", V0_10).mig_configs)


ENTRY = "version: v1\nmig-configs:\n  ok:\n  - devices: all\n    mig-enabled: false\n  x:\n  - {}\n"
STRICTNESS = [
    ("mig-enabled: 'true'\n    devices: all\n    mig-devices: {1g.10gb: 1}", False),
    ("mig-enabled: true\n    devices: all\n    mig-devices: {1g.10gb: '2'}", False),
    ("mig-enabled: true\n    devices: ['0']\n    mig-devices: {1g.10gb: 2}", False),
    ("mig-enabled: true\n    devices: 'some'\n    mig-devices: {1g.10gb: 2}", False),
    ("mig-enabled: true\n    devices: [0, 1.5]\n    mig-devices: {1g.10gb: 2}", False),
    ("mig-enabled: true\n    devices: [true]\n    mig-devices: {1g.10gb: 2}", False),
    ("mig-enabled: 1\n    devices: all\n    mig-devices: {1g.10gb: 2}", False),
    ("mig-enabled: true\n    devices: all\n    mig-devices: {1g.10gb: 0}", False),
    ("mig-enabled: true\n    devices: all\n    mig-devices: {1g.10gb: -1}", False),
    ("mig-enabled: true\n    devices: all", False),
    ("mig-enabled: false\n    devices: all\n    mig-devices: {1g.10gb: 1}", False),
    ("devices: all", False),
    ("mig-enabled: false", False),
    ("mig-enabled: false\n    devices: all\n    extra: 1", False),
    ("mig-enabled: false\n    devices: all\n    device-filter: 0x233010DE", False),  # a YAML int, not a string
    ("mig-enabled: true\n    devices: all\n    mig-devices: {1g.10gb: 2.0}", True),  # Go's decoder takes 2.0
    ("mig-enabled: true\n    devices: [0, 1.0]\n    mig-devices: {1g.10gb: 2}", True),
    ("mig-enabled: yes\n    devices: all\n    mig-devices: {1g.10gb: 2}", True),  # YAML 1.1 bool, both readers
    ("mig-enabled: true\n    devices: [-1]\n    mig-devices: {1g.10gb: 2}", True),  # matches no GPU, not an error
    ("mig-enabled: true\n    devices: all\n    mig-devices: {}", True),
    ("mig-enabled: ~\n    devices: all", True),  # JSON null into a bool: false
    ("mig-enabled: false\n    devices: all\n    device-filter: ''", True),
    ("mig-enabled: false\n    devices: all\n    device-filter: ['590352606', '0x2330_10DE']", True),
]


@pytest.mark.parametrize(("fields", "valid"), STRICTNESS)
def test_type_strictness_is_mig_parted_s(mig_parted: MigPartedCheck, fields: str, valid: bool) -> None:
    entry = "  - " + fields
    text = ENTRY.replace("  - {}\n", entry + "\n")
    code, output = mig_parted.run(text, "ok")
    assert (code == 0) is valid, output
    read = parse(text, "t", V0_10)
    assert ("x" in read.mig_configs) is valid, read.skipped
    assert "ok" in read.mig_configs  # the broken config costs only itself


@pytest.mark.parametrize(
    "text",
    [
        "version: v1\nmig-configs: {}\n",
        "version: v1\nmig-configs:\n  x: []\n",
        "version: v2\nmig-configs:\n  x:\n  - {devices: all, mig-enabled: false}\n",
        "mig-configs:\n  x:\n  - {devices: all, mig-enabled: false}\n",
        "version: v1\nextra: 1\nmig-configs:\n  x:\n  - {devices: all, mig-enabled: false}\n",
    ],
)
def test_nvidia_check_fails_on_a_broken_file(mig_parted: MigPartedCheck, text: str) -> None:
    verdict = mig_parted.check(text, "x")
    assert not verdict.ok
    assert "Error" in verdict.output or "error" in verdict.output


def test_the_audit_reports_a_broken_configmap_migctl_would_write(
    core: client.CoreV1Api, namespace: str, mig_parted_audit: MigPartedAudit
) -> None:
    """The same path every cluster test's ConfigMaps take: a broken one is caught and named."""
    broken = "version: v1\nmig-configs:\n  migctl-x:\n  - devices: all\n    mig-enabled: 'true'\n    mig-devices: {}\n"
    core.create_namespaced_config_map(
        namespace,
        {
            "metadata": {"name": "broken", "labels": {"app.kubernetes.io/managed-by": "migctl"}},
            "data": {"config.yaml": broken},
        },
    )
    deadline = time.monotonic() + 20
    found: list[str] = []
    while not found and time.monotonic() < deadline:
        mig_parted_audit.sync()
        found = mig_parted_audit.forget(namespace, "broken")
        time.sleep(0.2)
    assert found, "the audit did not flag a broken ConfigMap"
    assert "cannot unmarshal string into Go" in found[0] and f"{namespace}/broken" in found[0]
    core.delete_namespaced_config_map("broken", namespace)
