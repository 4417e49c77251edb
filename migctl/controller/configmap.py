"""migctl's own mig-parted ConfigMap: one named config per node layout, written with optimistic concurrency.

The GPU Operator's mig-manager reads exactly one ConfigMap (ClusterPolicy `migManager.config.name`), so migctl
owns one and the operator is pointed at it. On first use it is seeded with the configs of the operator's
ConfigMap (`gpu_operator.configmap_name`), so labels such as `all-balanced` keep resolving. Config names are
`config_name(layout)` (deterministic: the same layout always has the same name). Stale `migctl-*` configs are
dropped when no node's label, target or rollback annotation names them any more; other configs are never
removed. Every write is a compare-and-swap on resourceVersion; a 409 means re-read and merge again.

mig-parted rejects a whole file when one config in it is unreadable, so nothing unreadable is ever written: a
config of the seed (or of migctl's own ConfigMap) that the configured mig-manager release cannot read is left
out with a warning naming it, and the rest is kept; a layout holding such a name is refused before writing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from migctl.adapters.kube.errors import ConflictError
from migctl.adapters.kube.interface import ControllerApi, Obj
from migctl.adapters.views import node_view
from migctl.core.migparted.config import ConfigEntry, MigPartedConfig, entries_for, parse, render, without_unreadable
from migctl.core.model.gpu_config import CONFIG_PREFIX, NodeConfig
from migctl.core.model.settings import GpuOperatorSettings
from migctl.core.text.migparted_rules import format_version, name_problem
from migctl.errors import InputError
from migctl.reconcile.nodestate import target_configs
from migctl.wire.names import MANAGED_BY, MIG_CONFIG, MIGCTL

log = logging.getLogger(__name__)
ALL_DISABLED = "all-disabled"


def referenced_configs(nodes: Iterable[Obj]) -> set[str]:
    """Config names some node still needs: its label, its in-flight target, the config a rollback returns to."""
    out: set[str] = set()
    for node in nodes:
        view = node_view(node)
        label = view.labels.get(MIG_CONFIG)
        if label:
            out.add(label)
        out |= target_configs(view.annotations)
    return out


def merged(current: MigPartedConfig | None, name: str, layout: NodeConfig, keep: set[str]) -> MigPartedConfig | None:
    """The config file with `name` -> `layout` added and unreferenced migctl configs dropped; None: no change."""
    if current is not None:
        wanted = entries_for(layout)
        existing = current.mig_configs.get(name)
        stale = {n for n in current.mig_configs if n.startswith(CONFIG_PREFIX) and n not in keep and n != name}
        if existing == wanted and not stale and not current.skipped:
            return None
        base = MigPartedConfig(
            version="v1", mig_configs={n: e for n, e in current.mig_configs.items() if n not in stale}
        )
        return render({name: layout}, base)
    return render({name: layout})


class ConfigMapWriter:
    """Adds node layouts to migctl's ConfigMap (creating and seeding it when missing)."""

    def __init__(
        self,
        kube: ControllerApi,
        namespace: str,
        name: str,
        operator: GpuOperatorSettings,
        referenced: Callable[[], set[str]],
        hook: Callable[[str, str], None] | None = None,
    ) -> None:
        self.kube, self.namespace, self.name, self.operator = kube, namespace, name, operator
        self.key = operator.configmap_key
        self.referenced = referenced
        self.hook = hook  # (ConfigMap name, step "configmap-merged"): tests and failpoints stop there

    def _merged_step(self) -> None:
        if self.hook is not None:
            self.hook(self.name, "configmap-merged")

    def _parse(self, cm: Obj | None, source: str) -> MigPartedConfig | None:
        """The configs of a ConfigMap that the configured mig-manager can read; each one left out is logged."""
        text = ((cm or {}).get("data") or {}).get(self.key)
        if not text:
            return None
        version = self.operator.mig_parted_version
        try:
            config = without_unreadable(parse(str(text), source, version), version)
        except InputError as e:
            log.warning("ignoring unreadable %s: %s", source, e)
            return None
        for why in config.skipped:
            log.warning("%s: %s (mig-manager %s)", source, why, format_version(version))
        return config

    def _seed(self) -> MigPartedConfig:
        """What a new ConfigMap starts with: the operator's readable configs, and always `all-disabled` (the
        operator's default label; mig-parted also rejects a file with no config at all)."""
        base_cm = self.kube.read_configmap(self.operator.configmap_namespace, self.operator.configmap_name)
        base = self._parse(base_cm, "seed " + self.operator.configmap_name)
        configs = dict(base.mig_configs) if base else {}
        configs.setdefault(ALL_DISABLED, [ConfigEntry(devices="all", mig_enabled=False)])
        return MigPartedConfig(version="v1", mig_configs=configs)

    def _check_writable(self, config: str, layout: NodeConfig) -> None:
        version = self.operator.mig_parted_version
        for index, gpu in sorted(layout.items()):
            for profile, _ in gpu.layout:
                problem = name_problem(profile, version)
                if problem:
                    raise InputError(
                        f"config {config}",
                        f"GPU {index}: {problem}; refusing to write a config mig-manager "
                        f"{format_version(version)} cannot read (gpu_operator.mig_manager_version)",
                    )

    def ensure_exists(self) -> bool:
        """Create the ConfigMap (seeded from the operator's) if missing, so mig-manager can mount it; True if
        it wrote. Called when a replica becomes leader, before any node is labelled with a migctl config."""
        if self.kube.read_configmap(self.namespace, self.name) is not None:
            return False
        try:
            self.kube.create_configmap(self.namespace, self._body(render({}, self._seed())))
        except ConflictError:
            return False
        log.info("created ConfigMap %s/%s (seeded from %s)", self.namespace, self.name, self.operator.configmap_name)
        return True

    def _body(self, config: MigPartedConfig) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {MANAGED_BY: MIGCTL},
            },
            "data": {self.key: config.to_yaml()},
        }

    def ensure(self, config: str, layout: NodeConfig) -> bool:
        """Make sure `config` is in the ConfigMap with exactly `layout`; True if it wrote."""
        source = f"ConfigMap {self.namespace}/{self.name}[{self.key}]"
        self._check_writable(config, layout)
        for _ in range(10):
            cm = self.kube.read_configmap(self.namespace, self.name)
            keep = self.referenced() | {config}
            if cm is None:
                body = self._body(render({config: layout}, self._seed()))
                self._merged_step()
                try:
                    self.kube.create_configmap(self.namespace, body)
                except ConflictError:
                    continue  # created meanwhile: merge into it
                log.info("created %s with config %s", source, config)
                return True
            current = self._parse(cm, source)
            if current is None and ((cm.get("data") or {}).get(self.key)):
                raise InputError(source, "exists but is not a valid mig-parted config; fix or delete it")
            new_cfg = merged(current, config, layout, keep)
            if new_cfg is None:
                return False
            cm["data"] = {**(cm.get("data") or {}), self.key: new_cfg.to_yaml()}
            self._merged_step()
            try:
                self.kube.replace_configmap(self.namespace, cm)
            except ConflictError:
                log.info("%s changed meanwhile; merging again", source)
                continue
            log.info("wrote config %s into %s", config, source)
            return True
        raise ConflictError(f"write {source}", 409, "still conflicting after 10 attempts")
