"""The settings the in-cluster controller runs with, found through the API (the rules: `migctl.config.cluster`).

`migctl plan` and `migctl status` on a live cluster read the controller's config ConfigMap unless given `--config`
(or `--config-from-cluster NAMESPACE/NAME` names it), and say on stderr which config they used; `migctl run` out
of a cluster takes the Lease that ConfigMap's controller elects on. Imported only when a command talks to a
cluster: a snapshot stays offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from migctl.adapters.views import as_mapping
from migctl.config import Config, load_config
from migctl.config.cluster import CONFIG_KEY, CONFIG_SELECTOR, config_from_text, with_lease
from migctl.errors import InputError, MigctlError

Obj = dict[str, Any]
HOW = "pass --config-from-cluster NAMESPACE/NAME or --config FILE"


class ConfigMaps(Protocol):
    """What finding the config needs of `KubeApi`."""

    def list_configmaps(self, label_selector: str) -> list[Obj]: ...

    def read_configmap(self, namespace: str, name: str) -> Obj | None: ...


def where(cm: Mapping[str, Any]) -> str:
    meta = as_mapping(cm.get("metadata"))
    return f"configmap {meta.get('namespace') or '?'}/{meta.get('name') or '?'}"


def config_from_configmap(cm: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Config:
    """The controller's Config from its ConfigMap (as the API serves it), naming the ConfigMap in any error."""
    source = f"{where(cm)} key {CONFIG_KEY}"
    text = as_mapping(cm.get("data")).get(CONFIG_KEY)
    if not isinstance(text, str):
        raise InputError(source, f"missing; expected migctl's config file under data.{CONFIG_KEY}")
    return config_from_text(text, source, environ)


def lease_of(cm: Mapping[str, Any], cfg: Config) -> tuple[str, str]:
    """(namespace, name) of the Lease the controller of this ConfigMap elects on: its config's, an empty namespace
    being the ConfigMap's own (the chart runs the controller where its ConfigMap is)."""
    le = cfg.controller.leader_election
    return le.lease_namespace or str(as_mapping(cm.get("metadata")).get("namespace") or ""), le.lease_name


def _found(api: ConfigMaps) -> list[Obj]:
    return sorted(api.list_configmaps(CONFIG_SELECTOR), key=where)


def live_config(api: ConfigMaps, config_file: Path | None, ref: tuple[str, str] | None) -> tuple[Config, str]:
    """(the config, which one it is, for stderr): `--config`, else `--config-from-cluster`, else the controller's
    ConfigMap, else the defaults (the reason said). InputError when the named or found ConfigMap is bad or the
    choice is ambiguous."""
    if config_file is not None:
        return load_config(config_file), f"{config_file} (--config)"
    if ref is not None:
        cm = api.read_configmap(*ref)
        if cm is None:
            raise InputError(f"--config-from-cluster {ref[0]}/{ref[1]}", "no such ConfigMap")
        return config_from_configmap(cm), f"{where(cm)} (--config-from-cluster)"
    try:
        found = _found(api)
    except MigctlError as e:  # RBAC: a user who may read nodes and pods need not list ConfigMaps everywhere
        return load_config(None), f"built-in defaults: cannot look for the controller's config ({e}); {HOW}"
    if not found:
        return load_config(None), f"built-in defaults: no ConfigMap labelled {CONFIG_SELECTOR} on the cluster"
    if len(found) > 1:
        names = ", ".join(where(cm) for cm in found)
        raise InputError("the cluster", f"{len(found)} migctl config ConfigMaps ({names}); {HOW}")
    return config_from_configmap(found[0]), f"{where(found[0])} (the controller's, labelled {CONFIG_SELECTOR})"


def run_lease(api: ConfigMaps, cfg: Config) -> tuple[Config, str]:
    """For `migctl run` out of a pod with an empty Lease namespace: the Lease of the controller whose config
    ConfigMap is on the cluster, so this process contends with it instead of leading beside it. InputError when
    there is none, or several (it cannot tell which controller it stands in for)."""
    le = cfg.controller.leader_election
    fix = (
        "set controller.leader_election.lease_namespace (MIGCTL_CONTROLLER__LEADER_ELECTION__LEASE_NAMESPACE) to "
        "the controller's namespace"
    )
    try:
        found = _found(api)
    except MigctlError as e:
        raise InputError("leader election", f"out of a cluster, cannot find the controller's Lease ({e}); {fix}") from e
    if len(found) != 1:
        what = "no" if not found else f"{len(found)} ({', '.join(where(cm) for cm in found)})"
        raise InputError(
            "leader election",
            f"out of a cluster the Lease namespace is unknown, and {what} ConfigMap labelled {CONFIG_SELECTOR} "
            f"says whose controller this is; {fix}",
        )
    namespace, name = lease_of(found[0], config_from_configmap(found[0], environ={}))
    default = type(le).model_fields["lease_name"].default
    name = le.lease_name if le.lease_name != default else name  # a name set here wins over the controller's
    return with_lease(cfg, namespace, name), f"Lease {namespace}/{name}, the controller's of {where(found[0])}"
