"""Which pod a NodeManager may speak for: its claims checked against its certificate.

As the Kubernetes Node authorizer ties a kubelet to its own Node, the Controller ties a NodeManager
to its own pod. The role (``spiffe://motor/nodemanager``) only says a caller may call Register,
Heartbeat and ReportSoftwareFault; what it says in them is checked here:

* the pod IP it registers, heartbeats or reports for must be one of its certificate's IP SANs (a
  certificate without IP SANs, as cert-manager's csi-driver issues them since the pod IP is not
  known when the volume is mounted: the TCP peer address of the call);
* the host of the NodeManager address it registers must be one of those IPs or a DNS SAN of its
  certificate (so Guard, Apply and StopPod reach the pod that registered);
* it may only report ranks its pod hosts in that instance;
* a pod is bound to the pod URI (``spiffe://<trust_domain>/ns/<ns>/pod/<name>``) of the certificate
  that registered it first; a registration or heartbeat of that pod from another identity is refused;
* with ``security.require_pod_identity`` (on by default in ``mode: production``) the certificate must
  carry such a pod URI at all: one without (a certificate shared by NodeManagers) is refused.

A refusal is PERMISSION_DENIED naming the claim, logged (instance, pod, reason) and counted in
``motor_controller_identity_refusals_total{method,reason}``. Without a client certificate (the
plaintext demo) there is nothing to check against and nothing is checked; with ``security`` every
caller has one (the handshake requires it).
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass

import grpc
from prometheus_client import CollectorRegistry, Counter

from gen.motor.v1 import controller_pb2
from motor.common.security import PeerIdentity, identity_of_pem
from motor.controller.config import ControllerConfig
from motor.controller.instances import InstanceRegistry

log = logging.getLogger(__name__)

# Bounded values of the `reason` label.
REASONS = ("pod_ip", "nodemanager_address", "rank", "other_identity", "unknown_pod", "instance_cap",
           "no_pod_identity")


class IdentityRefusal(Exception):
    def __init__(self, reason: str, message: str) -> None:
        assert reason in REASONS, reason
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Caller:
    """The certificate of one call and the address it came from."""

    identity: PeerIdentity
    peer_ip: str | None
    # The pod URI of the controller's trust domain the pod is bound to ("" when the certificate has none).
    pod_uri: str

    @property
    def ips(self) -> frozenset[str]:
        if self.identity.ips:
            return self.identity.ips
        return frozenset({self.peer_ip}) if self.peer_ip else frozenset()

    def speaks_for(self, pod_ip: str) -> bool:
        return _norm_ip(pod_ip) in {_norm_ip(ip) for ip in self.ips}

    def owns_address(self, address: str) -> bool:
        host = _host_of(address)
        return self.speaks_for(host) or host.lower() in self.identity.dns_names

    def describe(self) -> str:
        return f"{self.pod_uri or 'no pod URI'}, IPs {sorted(self.ips)}"


def _norm_ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        return text


def _host_of(address: str) -> str:
    if address.startswith("["):
        return address[1:].partition("]")[0]
    return address.rpartition(":")[0] if address.count(":") == 1 else address


def peer_ip(peer: str) -> str | None:
    """'ipv4:10.0.0.1:5000' / 'ipv6:[::1]:5000' → the IP; None for another transport."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or None
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]") or None
    return None


def caller_of(context: grpc.aio.ServicerContext, trust_domain: str) -> Caller | None:
    """The caller's certificate identity; None when it presented none (plaintext: nothing to check)."""
    auth = context.auth_context() or {}
    certs = auth.get("x509_pem_cert") or []
    if not certs:
        return None
    identity = identity_of_pem(bytes(certs[0]))
    return Caller(identity, peer_ip(context.peer()), identity.pod_uri_in(trust_domain) or "")


def require_pod_identity(config: ControllerConfig) -> bool:
    """`security.require_pod_identity`, unset: on in production mode, where a certificate shared by
    NodeManagers would let each of them bind any pod first; off in test mode, whose development
    PKI may hand every NodeManager the one shared certificate. Off without `security` (nothing to
    check: plaintext)."""
    security = config.security
    if security is None:
        return False
    required = security.require_pod_identity
    if required is None:
        return config.mode == "production"
    if not required and config.mode == "production":
        log.warning("security.require_pod_identity=false in production mode: a NodeManager certificate "
                    "without a pod URI is bound by its IP SANs or connection address only")
    return required


class IdentityGate:
    """The checks of the three NodeManager calls, and the refusal counter."""

    def __init__(self, registry: InstanceRegistry, metrics_registry: CollectorRegistry, trust_domain: str,
                 require_pod_identity: bool = False) -> None:
        self.instances = registry
        self.trust_domain = trust_domain
        self.require_pod_identity = require_pod_identity
        self.refusals = Counter("motor_controller_identity_refusals_total",
                                "NodeManager claims refused because the caller's certificate does not cover them",
                                ["method", "reason"], registry=metrics_registry)

    def refused(self, method: str, instance_id: int, pod_ip: str, exc: IdentityRefusal) -> None:
        self.refusals.labels(method, exc.reason).inc()
        log.warning("identity: instance=%d pod=%s %s refused (%s): %s", instance_id, pod_ip, method, exc.reason, exc)

    def check_register(self, caller: Caller, req: controller_pb2.RegisterRequest) -> None:
        self._check_pod_uri("Register", caller)
        pod = req.pod
        if not caller.speaks_for(pod.pod_ip):
            raise IdentityRefusal("pod_ip", f"Register: pod_ip {pod.pod_ip} is not the caller's pod "
                                            f"(certificate: {caller.describe()})")
        if not caller.owns_address(pod.node_manager_address):
            raise IdentityRefusal("nodemanager_address",
                                  f"Register: node_manager_address {pod.node_manager_address} is not the caller's "
                                  f"(certificate: {caller.describe()}, DNS {sorted(caller.identity.dns_names)})")
        self._check_binding("Register", caller, req.instance_id, pod.pod_ip)

    def check_heartbeat(self, caller: Caller, req: controller_pb2.HeartbeatRequest) -> None:
        self._check_pod_uri("Heartbeat", caller)
        if not caller.speaks_for(req.pod_ip):
            raise IdentityRefusal("pod_ip", f"Heartbeat: pod_ip {req.pod_ip} is not the caller's pod "
                                            f"(certificate: {caller.describe()})")
        self._check_binding("Heartbeat", caller, req.instance_id, req.pod_ip)

    def check_report(self, caller: Caller, req: controller_pb2.ReportSoftwareFaultRequest) -> None:
        self._check_pod_uri("ReportSoftwareFault", caller)
        if not caller.speaks_for(req.pod_ip):
            raise IdentityRefusal("pod_ip", f"ReportSoftwareFault: pod_ip {req.pod_ip} is not the caller's pod "
                                            f"(certificate: {caller.describe()})")
        record = self.instances.get(req.instance_id)
        if record is None:
            return  # the report is answered NOT_FOUND: nothing to protect
        pod = record.pods.get(req.pod_ip)
        if pod is None:
            raise IdentityRefusal("unknown_pod", f"ReportSoftwareFault: pod {req.pod_ip} is not a pod of instance "
                                                 f"{req.instance_id}")
        if req.endpoint_id not in pod.endpoints:
            raise IdentityRefusal("rank", f"ReportSoftwareFault: rank {req.endpoint_id} is not hosted by pod "
                                          f"{req.pod_ip} (its ranks: {list(pod.ranks)})")
        self._check_binding("ReportSoftwareFault", caller, req.instance_id, req.pod_ip)

    def _check_pod_uri(self, method: str, caller: Caller) -> None:
        if self.require_pod_identity and not caller.pod_uri:
            raise IdentityRefusal("no_pod_identity",
                                  f"{method}: the caller's certificate has no pod URI "
                                  f"spiffe://{self.trust_domain}/ns/<namespace>/pod/<name> "
                                  f"(certificate: {caller.describe()}); security.require_pod_identity needs every "
                                  "NodeManager to present its own pod's certificate, not one shared by pods")

    def _check_binding(self, method: str, caller: Caller, instance_id: int, pod_ip: str) -> None:
        record = self.instances.get(instance_id)
        pod = record.pods.get(pod_ip) if record is not None else None
        if pod is not None and pod.identity and pod.identity != caller.pod_uri:
            raise IdentityRefusal("other_identity",
                                  f"{method}: pod {pod_ip} of instance {instance_id} is {pod.identity}; the caller "
                                  f"is {caller.pod_uri or 'a certificate without a pod URI'}")
