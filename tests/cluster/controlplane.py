"""A real, light Kubernetes 1.37 control plane for tests: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager (DRA controllers only) and kwok.

This is envtest's recipe (controller-runtime pkg/internal/testing/controlplane) redone in Python so the test
suite needs no Go at run time, only the binaries `hack/testbin.sh` builds. There is no kubelet: kwok plays it
for nodes annotated `kwok.x-k8s.io/node=fake` (marks them Ready, marks their pods Running, removes deleted
pods). kube-controller-manager runs only what DRA needs (`KCM_CONTROLLERS`): the resourceclaim controller
(ResourceClaimTemplate -> ResourceClaim per pod, deallocation), the device-taint eviction controller and the
garbage collector (which deletes a deleted pod's generated claims, and a deleted node's ResourceSlices).
Every DRA gate the tests use is on by default at 1.37 (DRADeviceTaints, DRADeviceTaintRules,
DRAExtendedResource, DRAPrioritizedList GA; DRAPartitionableDevices beta-on), and resource.k8s.io/v1 is served
by default, so no --feature-gates or --runtime-config are passed. Everything else a full controller manager
does stays off, deliberately: namespaces never finish deleting, PDB status is never computed (tests set it
themselves), no Deployment/Job/DaemonSet makes pods; the TaintNodesByCondition admission plugin is
off because nothing would ever remove its `not-ready` taint. See docs/testing.md.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import ipaddress
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client, config

BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")
# The controllers DRA needs and nothing else (names from cmd/kube-controller-manager/names, 1.37). The garbage
# collector is among them: the resourceclaim controller deletes a pod's generated claim only while the pod still
# exists (done); for a deleted pod it clears the allocation and leaves the claim to the GC (ownerReferences).
KCM_CONTROLLERS = ("resourceclaim-controller", "device-taint-eviction-controller", "garbage-collector-controller")
KWOK_STAGES = "kwok-stages.yaml"  # kwok's own Stage objects, copied next to the binary by hack/testbin.sh
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message carries the component log tails."""


def missing_binaries(bin_dir: Path) -> list[str]:
    """Names from BINARIES that are not executable files in `bin_dir`."""
    missing = [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]
    return missing if (bin_dir / KWOK_STAGES).is_file() else [*missing, KWOK_STAGES]


# -- certificates ---------------------------------------------------------------------------------------


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class TinyCA:
    """A throw-away ECDSA P-256 CA, like envtest's certs.TinyCA; leaves are valid for a week."""

    name: str
    key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    cert: x509.Certificate = field(init=False)

    def __post_init__(self) -> None:
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)])
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    def issue(
        self, common_name: str, *, organizations: tuple[str, ...] = (), server: bool = False
    ) -> tuple[bytes, bytes]:
        """(cert PEM, key PEM) for a serving cert (SANs localhost/127.0.0.1) or a client cert (CN=user, O=groups)."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(self.key, hashes.SHA256())
        return _pem_cert(cert), _pem_key(key)


# -- processes --------------------------------------------------------------------------------------------


def free_port() -> int:
    """A loopback port that was free a moment ago (racy by nature; start() retries on a lost race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Component:
    """One running binary with its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(text[-lines:])


class ControlPlane:
    """etcd → kube-apiserver → kube-scheduler + kube-controller-manager → kwok on free loopback ports.

    Use `start()`/`stop()` or the context manager. `kubeconfig` is a client-certificate kubeconfig for the
    user `admin` in group `system:masters`.
    """

    def __init__(self, bin_dir: Path, work_dir: Path | None = None, start_timeout: float = 60.0, attempts: int = 3):
        missing = missing_binaries(bin_dir)
        if missing:
            raise ControlPlaneError(f"{bin_dir} lacks {', '.join(missing)} (run hack/testbin.sh)")
        self.bin_dir = bin_dir
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="migctl-cp-"))
        self.start_timeout = start_timeout
        self.attempts = attempts
        self.components: list[Component] = []
        self.kubeconfig = self.work_dir / "kubeconfig"
        self.api_port = 0
        self.startup_seconds = 0.0

    # -- public API ---------------------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def start(self) -> None:
        """Start everything; retry from scratch when an attempt fails (free-port races, slow machine)."""
        begin = time.monotonic()
        errors: list[str] = []
        for attempt in range(1, self.attempts + 1):
            try:
                self._start_once(attempt)
            except ControlPlaneError as e:
                errors.append(f"attempt {attempt}: {e}")
                self._kill_all()
                continue
            self.startup_seconds = time.monotonic() - begin
            return
        raise ControlPlaneError("control plane did not start:\n" + "\n\n".join(errors))

    def stop(self) -> None:
        """Stop the components in reverse order; drop etcd's data (the logs stay unless the work dir is ours)."""
        self._kill_all()
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        else:
            for data in self.work_dir.glob("attempt-*/etcd-data"):
                shutil.rmtree(data, ignore_errors=True)

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of every component's log, for failure reports."""
        return "\n".join(
            f"----- {c.name} (exit {c.proc.poll()}) {c.log} -----\n{c.tail(lines)}" for c in self.components
        )

    def api_client(self) -> client.ApiClient:
        """A fresh admin `kubernetes.client.ApiClient` (the caller closes it)."""
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=cfg)
        cfg.connection_pool_maxsize = 16  # watches + workers + the test itself share one client
        return client.ApiClient(cfg)

    # -- internals ----------------------------------------------------------------------------------------

    def _start_once(self, attempt: int) -> None:
        d = self.work_dir / f"attempt-{attempt}"
        d.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.start_timeout
        self.components = []

        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn(
            d,
            "etcd",
            [
                f"--data-dir={d / 'etcd-data'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=1073741824",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", f"{etcd_url}/health", deadline)

        pki = self._write_pki(d)
        self.api_port = free_port()
        self._spawn(
            d,
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'client-ca.crt'}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                "--endpoint-reconciler-type=none",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                # ServiceAccount: nothing creates the default SA (no serviceaccount controller). TaintNodesByCondition:
                # it taints new nodes not-ready:NoSchedule and only the (absent) node-lifecycle controller lifts it.
                "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                f"--service-account-issuer=https://127.0.0.1:{self.api_port}/",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=0",
                "--max-mutating-requests-inflight=0",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait("kube-apiserver", f"{self.server}/healthz", deadline)
        self._write_kubeconfig(pki)
        self._wait_default_namespace(deadline)

        sched_port = free_port()
        self._spawn(
            d,
            "kube-scheduler",
            [
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                "--v=1",
            ],
        )
        kcm_port = free_port()
        self._spawn(
            d,
            "kube-controller-manager",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(KCM_CONTROLLERS)}",
                "--leader-elect=false",
                "--use-service-account-credentials=false",  # one admin client; no token controller runs
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                "--v=1",
            ],
        )
        kwok_port = free_port()
        kwok_config = self.bin_dir / KWOK_STAGES  # the kwok binary has no default stages; without them it exits
        self._spawn(
            d,
            "kwok",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={kwok_config}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}",
                "--cidr=10.0.0.0/24",
                "--node-ip=10.0.0.1",
                f"--server-address=127.0.0.1:{kwok_port}",
            ],
        )
        self._wait("kube-scheduler", f"https://127.0.0.1:{sched_port}/healthz", deadline)
        self._wait("kube-controller-manager", f"https://127.0.0.1:{kcm_port}/healthz", deadline)
        self._wait("kwok", f"http://127.0.0.1:{kwok_port}/healthz", deadline)

    def _spawn(self, d: Path, name: str, args: list[str]) -> None:
        log = d / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(self.bin_dir / name), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=d,
                start_new_session=True,  # our own process group: a Ctrl-C in pytest does not orphan-kill it early
            )
        self.components.append(Component(name, proc, log))
        atexit.register(_terminate, proc, 2.0)  # safety net if the fixture's teardown never runs

    def _wait(self, name: str, url: str, deadline: float) -> None:
        """Poll a health URL every 100 ms (envtest's rhythm) until 200, the process dies or time runs out."""
        comp = next(c for c in self.components if c.name == name)
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        last = ""
        while time.monotonic() < deadline:
            if comp.proc.poll() is not None:
                raise ControlPlaneError(f"{name} exited with {comp.proc.returncode}\n{self.log_tails()}")
            try:
                with urllib.request.urlopen(url, timeout=2, context=ctx if url.startswith("https") else None) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.1)
        raise ControlPlaneError(f"{name} not healthy at {url} in time (last: {last})\n{self.log_tails()}")

    def _wait_default_namespace(self, deadline: float) -> None:
        """Like envtest: the apiserver's bootstrap controller creates `default` shortly after /healthz."""
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            while time.monotonic() < deadline:
                with contextlib.suppress(client.ApiException):
                    core.read_namespace("default")
                    return
                time.sleep(0.1)
        raise ControlPlaneError(f"namespace 'default' never appeared\n{self.log_tails()}")

    def _write_pki(self, d: Path) -> Path:
        """Serving CA + cert, client CA, and the service-account key pair (three separate roots, as envtest)."""
        pki = d / "pki"
        pki.mkdir(exist_ok=True)
        serving, clients = TinyCA("migctl-test-serving"), TinyCA("migctl-test-clients")
        crt, key = serving.issue("localhost", server=True)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        admin_crt, admin_key = clients.issue("admin", organizations=("system:masters",))
        files = {
            "serving-ca.crt": _pem_cert(serving.cert),
            "apiserver.crt": crt,
            "apiserver.key": key,
            "client-ca.crt": _pem_cert(clients.cert),
            "sa.key": _pem_key(sa_key),
            "sa.pub": sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            "admin.crt": admin_crt,
            "admin.key": admin_key,
        }
        for name, data in files.items():
            (pki / name).write_bytes(data)
            (pki / name).chmod(0o600)
        return pki

    def _write_kubeconfig(self, pki: Path) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "migctl-test",
                    "cluster": {"server": self.server, "certificate-authority": str(pki / "serving-ca.crt")},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(pki / "admin.crt"),
                        "client-key": str(pki / "admin.key"),
                    },
                }
            ],
            "contexts": [{"name": "migctl-test", "context": {"cluster": "migctl-test", "user": "admin"}}],
            "current-context": "migctl-test",
        }
        self.kubeconfig.write_text(yaml.safe_dump(cfg))

    def _kill_all(self) -> None:
        for comp in reversed(self.components):
            _terminate(comp.proc)


def _terminate(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; only ever the process we started."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace)


def find_bin_dir(
    repo_root: Path, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
) -> tuple[Path | None, str]:
    """The test-binaries dir from `MIGCTL_TESTBIN`, else `hack/testbin.sh --path`; (None, why) when absent."""
    env = os.environ.get("MIGCTL_TESTBIN")
    if env:
        p = Path(env)
        missing = missing_binaries(p)
        return (p, f"MIGCTL_TESTBIN={p}") if not missing else (None, f"MIGCTL_TESTBIN={p} lacks {', '.join(missing)}")
    script = repo_root / "hack" / "testbin.sh"
    try:
        res = run([str(script), "--path"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{script} --path failed: {e}"
    out = res.stdout.strip()
    if res.returncode != 0 or not out:
        return None, f"{script} --path found no complete build (exit {res.returncode}); run hack/testbin.sh"
    p = Path(out)
    missing = missing_binaries(p)
    return (p, f"hack/testbin.sh --path -> {p}") if not missing else (None, f"{p} lacks {', '.join(missing)}")
