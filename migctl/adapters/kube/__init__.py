"""The Kubernetes adapter: the only package that imports the client.

`connect` (credentials, `migctl plan`'s read), `calls` (how a call is made: translation, bounded retries, stop),
`api` (`KubeApi`: every call migctl makes, plain dicts in and out), `errors` (the one error family),
`cache` (the controller's watched view of the cluster), `interface` (what each component needs, as protocols).
"""

from migctl.adapters.kube.api import KubeApi
from migctl.adapters.kube.calls import Obj, Stopped
from migctl.adapters.kube.connect import ApiClient, api_client, read_objects

__all__ = ["ApiClient", "KubeApi", "Obj", "Stopped", "api_client", "read_objects"]
