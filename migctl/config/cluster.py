"""The settings as a cluster holds them: the controller's config ConfigMap, and the namespace migctl runs in.

Two rules live here, so that every command applies them the same way:

* **One Lease wherever migctl runs.** `controller.leader_election.lease_namespace` empty (the default) means the
  namespace migctl runs in: in a pod, env `POD_NAMESPACE`, else the service account's namespace file (the chart
  installs every component in the release namespace, and renders that namespace explicitly too). Out of a cluster
  there is no such namespace: `migctl run` then takes the Lease of the controller whose config ConfigMap it finds
  (`cli.cluster_config.lease_of`), and refuses to lead without one, instead of electing itself on a Lease nobody
  else holds.
* **The CLI reads what the controller reads.** The chart's ConfigMap `<release>-config` carries the labels of
  `CONFIG_SELECTOR` and the file under `CONFIG_KEY`; `cli.cluster_config.config_from_configmap` validates it with
  the same `Config` model (and `MIGCTL_*` overrides) as `load_config` does a file. Reading the ConfigMap object is
  the CLI's (it may read API objects; this layer may not).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import ValidationError

from migctl.config import Config, _merge, env_overrides
from migctl.errors import InputError, from_validation_error
from migctl.wire.names import COMPONENT, MIGCTL, PART_OF

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
POD_NAMESPACE = "POD_NAMESPACE"  # the downward API's metadata.namespace, where a manifest sets it
CONFIG_SELECTOR = f"{PART_OF}={MIGCTL},{COMPONENT}=config"  # deploy/helm/migctl/templates/configmap.yaml
CONFIG_KEY = "config.yaml"


def own_namespace(environ: Mapping[str, str] | None = None, sa_file: Path | None = None) -> str | None:
    """The namespace this process runs in, or None outside a pod."""
    env = os.environ if environ is None else environ
    if env.get(POD_NAMESPACE, "").strip():
        return env[POD_NAMESPACE].strip()
    try:
        text = (sa_file or SERVICE_ACCOUNT_NAMESPACE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def with_lease(cfg: Config, namespace: str, name: str | None = None) -> Config:
    """`cfg` with the Lease's namespace (and name, when given) filled in."""
    le = cfg.controller.leader_election
    lease = le.model_copy(update={"lease_namespace": namespace, **({"lease_name": name} if name else {})})
    return cfg.model_copy(update={"controller": cfg.controller.model_copy(update={"leader_election": lease})})


def in_pod_lease(cfg: Config, environ: Mapping[str, str] | None = None, sa_file: Path | None = None) -> Config:
    """`cfg` with an empty Lease namespace resolved to this pod's namespace (unchanged when set, or out of a pod)."""
    if cfg.controller.leader_election.lease_namespace:
        return cfg
    namespace = own_namespace(environ, sa_file)
    return with_lease(cfg, namespace) if namespace else cfg


def config_from_text(text: str, source: str, environ: Mapping[str, str] | None = None) -> Config:
    """A config file's text, validated as `load_config` validates a file (`MIGCTL_*` overrides included)."""
    try:
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise InputError(source, f"broken YAML: {e}") from e
    if not isinstance(loaded, dict):
        raise InputError(source, "expected a mapping of settings (planner:, gpu_operator:, controller:, ...)")
    overrides, used = env_overrides(os.environ if environ is None else environ)
    if used:
        source += f" (with environment overrides {', '.join(used)})"
    try:
        return Config.model_validate(_merge(loaded, overrides))
    except ValidationError as e:
        raise from_validation_error(source, e) from e
