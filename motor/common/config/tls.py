"""TLS of Motor's servers and clients, and `security`, the one switch that turns on mTLS everywhere."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, FilePath, model_validator

from motor.common.config.base import ConfigModel

# A file that must exist when the config is loaded; YAML/JSON give strings, so this type is not strict.
ConfigFile = Annotated[FilePath, Field(strict=False)]


class TlsConfig(ConfigModel):
    """Server-side TLS. Both files, or neither; mTLS adds a client CA and requires client certs."""

    cert_file: ConfigFile = Field(description="PEM certificate (chain) the server presents.")
    key_file: ConfigFile = Field(description="PEM private key of cert_file.")
    client_ca_file: ConfigFile | None = Field(
        default=None, description="PEM CA that client certificates must chain to; unset: clients are not verified.")
    require_client_auth: bool = Field(
        default=False,
        description="Refuse clients without a certificate of client_ca_file (mTLS); needs client_ca_file.")

    @model_validator(mode="after")
    def _check(self) -> TlsConfig:
        if self.require_client_auth and self.client_ca_file is None:
            raise ValueError("require_client_auth=true needs client_ca_file")
        return self


class ClientTlsConfig(ConfigModel):
    """Client-side TLS for calls to other Motor services; cert+key present means mTLS."""

    ca_file: ConfigFile = Field(description="PEM CA the server's certificate must chain to.")
    cert_file: ConfigFile | None = Field(
        default=None, description="PEM client certificate (mTLS identity); goes with key_file.")
    key_file: ConfigFile | None = Field(default=None, description="PEM private key of cert_file.")
    server_name_override: str | None = Field(
        default=None, description="Name checked against the server's certificate instead of the dialled host.")

    @model_validator(mode="after")
    def _check(self) -> ClientTlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mTLS client identity)")
        return self


class SecurityConfig(ConfigModel):
    """The one switch for mTLS (see motor.common.security): this process's certificate and key, and
    the CA that signed every Motor certificate. Set, it turns on mTLS for every gRPC server and
    client of the process, role authorization on its gRPC servers, TLS on its HTTP pages and TLS
    with a client certificate towards etcd. The role is the certificate's SAN URI
    spiffe://motor/<role>."""

    ca_file: ConfigFile = Field(
        description="PEM CA that signed every Motor certificate (peers are checked against it).")
    cert_file: ConfigFile = Field(
        description="PEM certificate of this process; its SAN URI spiffe://motor/<role> is its role.")
    key_file: ConfigFile = Field(description="PEM private key of cert_file.")
    require_client_cert_on_inference: bool = Field(
        default=False,
        description="Coordinator only: the OpenAI front also asks inference clients for a certificate of ca_file.")
    # Unset, the Controller decides by its mode: on in `mode: production`, off in `mode: test` (the
    # development PKI's shared `nodemanager` certificate has no pod URI).
    require_pod_identity: bool | None = Field(
        default=None,
        description="Controller only: refuse a NodeManager's Register, Heartbeat and ReportSoftwareFault "
                    "when its certificate has no pod URI spiffe://<trust_domain>/ns/<ns>/pod/<name> (a "
                    "certificate shared by NodeManagers). Unset: on in mode production, off in mode test.")
    # The same on every Motor process of a deployment: roles are read from spiffe://<trust_domain>/<role>,
    # pods' identities from spiffe://<trust_domain>/ns/<ns>/pod/<name>.
    trust_domain: str = Field(
        default="motor", pattern=r"^[a-z0-9]([a-z0-9.-]{0,253}[a-z0-9])?$",
        description="SPIFFE trust domain of the role URIs (spiffe://<trust_domain>/<role>) and of the pods' "
                    "identities (spiffe://<trust_domain>/ns/<ns>/pod/<name>); the Controller takes a "
                    "NodeManager's pod URI only from this domain.")


def security_exclusive(config: Any) -> Any:
    """A service's model validator: `security` derives server.tls and client_tls (where the service
    has one); both at once would be two truths."""
    if config.security is None:
        return config
    if config.server.tls is not None:
        raise ValueError("security and server.tls are exclusive: security sets the server's mTLS")
    if getattr(config, "client_tls", None) is not None:
        raise ValueError("security and client_tls are exclusive: security sets the client's mTLS")
    return config
