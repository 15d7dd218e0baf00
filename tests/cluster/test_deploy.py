"""deploy/: the Kubernetes manifests against Kubernetes' own schemas (bundled by kubernetes-validate,
checked offline), the compose file by Debian's docker-compose, the HAProxy configuration by haproxy,
and what they say against the app (every setting they name exists, probes hit /healthz, the memory
limit holds what docs/self-host.md says a replica needs)."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_checks import unavailable

from app.bench.cluster_kit import Missing, tool
from app.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
SETTINGS = {f"EXPLORER_{name.upper()}" for name in Settings.model_fields} | {"DATABASE_URL"}
MIB_PER_RUN = Settings().memory_mib
IDLE_MIB = 672  # docs/self-host.md: server + fork server + standby fork server and their children


def documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def one(kind: str) -> dict[str, Any]:
    found = [doc for doc in documents() if doc["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def mib(quantity: str, binary: bool = False) -> float:
    """A memory quantity in MiB: Kubernetes' (``M`` is 10^6 bytes) or Docker's (``binary``: ``M`` is MiB)."""
    number, unit = re.fullmatch(r"([\d.]+)([A-Za-z]*)", quantity).groups()  # type: ignore[union-attr]
    decimal = 1 if binary else 1e6 / 2**20
    return float(number) * {"Mi": 1, "Gi": 1024, "M": decimal, "m": decimal, "G": 1024 * decimal,
                            "": 1 / 2**20}[unit]


def test_the_manifests_are_valid_kubernetes_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    import kubernetes_validate

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("kubernetes-validate tried the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    version = kubernetes_validate.latest_version()
    kinds = []
    for doc in documents():
        kubernetes_validate.validate(doc, version, strict=True)  # raises on any unknown or bad field
        kinds.append(doc["kind"])
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap", "Secret"} <= set(kinds)
    # the check can fail: a misspelt field is refused
    broken = one("Deployment")
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProb"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def test_the_manifests_fit_the_app() -> None:
    deployment, service, scaler = one("Deployment"), one("Service"), one("HorizontalPodAutoscaler")
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert scaler["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                                "name": deployment["metadata"]["name"]}
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": 8000} and service["spec"]["ports"][0]["targetPort"] == "http"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    # the sandbox's needs: no capability, the default seccomp profile, not root
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001
    config = one("ConfigMap")["data"]
    named = set(config) | set(one("Secret")["stringData"])
    assert named <= SETTINGS, named - SETTINGS
    running = int(config.get("EXPLORER_MAX_RUNNING", Settings().max_running))
    assert mib(container["resources"]["limits"]["memory"]) >= IDLE_MIB + running * MIB_PER_RUN


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_the_compose_file_fits_the_app() -> None:
    services = compose()["services"]
    assert set(services) == {"app", "proxy", "db", "redis"}
    app = services["app"]
    assert app["build"]["context"] == ".." and (DEPLOY / app["build"]["context"] / "Dockerfile").is_file()
    assert "ports" not in app  # reached through the proxy only
    settings = app["environment"]
    assert set(settings) <= SETTINGS, set(settings) - SETTINGS
    assert settings["EXPLORER_TRUSTED_PROXIES"] == services["proxy"]["networks"]["back"]["ipv4_address"]
    assert settings["EXPLORER_RATE_STORAGE"].startswith("redis://redis:")
    assert settings["EXPLORER_CACHE_URL"].startswith("redis://redis:")
    running = int(settings["EXPLORER_MAX_RUNNING"])
    limit = mib(app["deploy"]["resources"]["limits"]["memory"], binary=True)
    assert limit >= IDLE_MIB + running * MIB_PER_RUN
    proxy = (DEPLOY / "haproxy" / "haproxy.cfg").read_text()
    assert "option httpchk GET /healthz" in proxy and "app:8000" in proxy and "option forwardfor" in proxy


def _tool(name: str, package: str) -> str:
    try:
        return tool(name, package)
    except Missing as error:
        unavailable(str(error))
        raise


def test_debians_docker_compose_accepts_the_compose_file() -> None:
    binary = _tool("docker-compose", "docker-compose")
    for extra in ([], ["--compatibility"]):
        done = subprocess.run([binary, *extra, "-f", str(DEPLOY / "compose.yaml"), "config"],
                              capture_output=True, text=True, timeout=60, cwd=DEPLOY)
        assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["services"]["app"]["deploy"]["replicas"] == 2
    # the check can fail: a misspelt option is refused
    broken = DEPLOY / ".broken-compose.yaml"
    data = compose()
    data["services"]["redis"]["healthchek"] = data["services"]["redis"].pop("healthcheck")
    try:
        broken.write_text(yaml.safe_dump(data))
        done = subprocess.run([binary, "-f", str(broken), "config", "-q"], capture_output=True, text=True,
                              timeout=60, cwd=DEPLOY)
        assert done.returncode != 0 and "healthchek" in done.stderr
    finally:
        broken.unlink(missing_ok=True)


def test_haproxy_accepts_its_configuration() -> None:
    binary = _tool("haproxy", "haproxy")
    done = subprocess.run([binary, "-c", "-f", str(DEPLOY / "haproxy" / "haproxy.cfg")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
