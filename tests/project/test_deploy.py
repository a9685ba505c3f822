"""The recipes in deploy/: they parse, name only real settings with valid values, and keep the essentials
(pinned images, the proxy's port and probes, non-root, read-only, isolation, room for a graceful stop).

Kubernetes manifests are also validated against the API schemas `kubernetes-validate` ships (offline),
compose files with `docker compose config` where a compose client is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.settings import ENV_PREFIX, Settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE_FILES = [DEPLOY / "docker-compose.yml", DEPLOY / "docker-compose.vllm.yml"]
KUBE_FILES = [DEPLOY / "kubernetes" / "sidecar.yaml", DEPLOY / "kubernetes" / "replicas.yaml"]
SETTING_NAMES = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
PROXY_PORT = 8080
GRACEFUL_DEFAULT = 30.0  # compacting-proxy --timeout-graceful-shutdown
OLDEST_KUBERNETES = "1.29.0"  # native sidecars (initContainers with restartPolicy: Always)

Doc = dict[str, Any]


# libyaml's safe loader where PyYAML was built with it: the same documents, a tenth of the time.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path: Path) -> list[Doc]:
    return [doc for doc in yaml.load_all(path.read_text(), Loader=SAFE_LOADER) if doc is not None]


def compose(path: Path) -> Doc:
    (doc,) = load(path)
    return doc


def kube_docs() -> list[tuple[Path, Doc]]:
    return [(path, doc) for path in KUBE_FILES for doc in load(path)]


def pod_specs() -> list[tuple[str, Doc]]:
    return [
        (doc["metadata"]["name"], doc["spec"]["template"]["spec"])
        for _, doc in kube_docs()
        if doc["kind"] == "Deployment"
    ]


def containers(pod: Doc) -> list[Doc]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def proxy_containers() -> list[tuple[Doc, Doc]]:
    return [(pod, c) for _, pod in pod_specs() for c in containers(pod) if "compacting-proxy" in c["image"]]


def graceful_timeout(argv: list[str]) -> float:
    if "--timeout-graceful-shutdown" in argv:
        return float(argv[argv.index("--timeout-graceful-shutdown") + 1])
    return GRACEFUL_DEFAULT


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", duration)
    assert match and duration, f"a compose duration like 40s or 1m30s, got {duration!r}"
    return int(match[1] or 0) * 60 + int(match[2] or 0)


def env_of(container: Doc) -> dict[str, Doc]:
    return {item["name"]: item for item in container.get("env", [])}


def compact_settings() -> list[tuple[str, dict[str, str]]]:
    """Every place that sets COMPACT_* values: compose services, ConfigMaps, container env values."""
    found = []
    for path in COMPOSE_FILES:
        for name, service in compose(path)["services"].items():
            env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
            found.append((f"{path.name}:{name}", env))
    for path, doc in kube_docs():
        if doc["kind"] == "ConfigMap":
            found.append((f"{path.name}:configmap/{doc['metadata']['name']}", dict(doc["data"])))
    for name, pod in pod_specs():
        for c in containers(pod):
            found.append(
                (f"deployment/{name}:{c['name']}", {k: v.get("value", "") for k, v in env_of(c).items()})
            )
    return [(where, {k: v for k, v in env.items() if k.startswith(ENV_PREFIX)}) for where, env in found]


@pytest.mark.parametrize("path", sorted(DEPLOY.rglob("*.y*ml")), ids=lambda p: p.name)
def test_every_yaml_parses(path: Path) -> None:
    docs = load(path)
    assert docs and all(isinstance(doc, dict) for doc in docs)
    assert path in COMPOSE_FILES + KUBE_FILES, "a new recipe: add it to tests/project/test_deploy.py"


def test_every_compact_name_is_a_setting() -> None:
    named = {name for _, env in compact_settings() for name in env}
    named |= {name for _, pod in pod_specs() for c in containers(pod) for name in env_of(c)}
    named |= set(
        re.findall(r"COMPACT_[A-Z0-9_]+", "\n".join(p.read_text() for p in DEPLOY.rglob("*") if p.is_file()))
    )
    named = {n for n in named if n.startswith(ENV_PREFIX)}
    assert named and not named - SETTING_NAMES, f"not in proxy/settings.py: {sorted(named - SETTING_NAMES)}"


@pytest.mark.parametrize("where, env", compact_settings(), ids=lambda v: v if isinstance(v, str) else "")
def test_compact_values_are_valid_settings(
    where: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        if value and "${" not in value:  # compose interpolation is the caller's
            monkeypatch.setenv(name, value)
    Settings(_env_file=None)  # type: ignore[call-arg]


# --- compose ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_images_are_pinned_and_the_proxy_is_built_from_this_repo(path: Path) -> None:
    services = compose(path)["services"]
    for name, service in services.items():
        image = service.get("image", "")
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin a tag, got {image!r}"
    build = services["proxy"]["build"]
    assert (path.parent / build["context"]).resolve() == REPO
    assert build.get("dockerfile", "Dockerfile") == "Dockerfile"


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_app_reaches_only_the_proxy_and_only_the_proxy_reaches_the_upstream(path: Path) -> None:
    doc = compose(path)
    services = doc["services"]
    upstream = urllib.parse.urlsplit(services["proxy"]["environment"]["COMPACT_UPSTREAM_URL"])
    assert upstream.hostname in services, "COMPACT_UPSTREAM_URL names the upstream service"
    model_server = services[upstream.hostname]
    nets = {name: set(service["networks"]) for name, service in services.items()}
    assert nets["app"] & nets["proxy"], "the app reaches the proxy"
    assert not nets["app"] & set(model_server["networks"]), "the app does not reach the model server"
    shared = nets["proxy"] & set(model_server["networks"])
    assert shared and all(doc["networks"][n].get("internal") for n in shared), "proxy ↔ upstream is internal"
    assert "ports" not in model_server, "the model server publishes no port"
    app_env = services["app"]["environment"]
    assert app_env["OPENAI_BASE_URL"] == f"http://proxy:{PROXY_PORT}/v1"


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_proxy_is_locked_down_and_stops_gracefully(path: Path) -> None:
    proxy = compose(path)["services"]["proxy"]
    assert proxy["read_only"] is True and proxy["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in proxy["security_opt"]
    assert all(str(p).endswith(f":{PROXY_PORT}") for p in proxy.get("ports", []))
    assert all(str(p).startswith("127.0.0.1:") for p in proxy.get("ports", [])), "published on loopback only"
    assert seconds(proxy["stop_grace_period"]) > graceful_timeout(proxy.get("command", []))


def test_compose_ollama_keeps_its_models_and_sets_per_model_windows() -> None:
    services = compose(COMPOSE_FILES[0])["services"]
    assert services["ollama"]["image"].startswith("ollama/ollama:")
    assert any(v.endswith(":/root/.ollama") for v in services["ollama"]["volumes"])
    env = services["proxy"]["environment"]
    assert env["COMPACT_UPSTREAM_URL"] == "http://ollama:11434/v1"
    assert Settings(model_windows=env["COMPACT_MODEL_WINDOWS"]).window_for("llama3.1:8b").window == 8192
    assert int(services["ollama"]["environment"]["OLLAMA_CONTEXT_LENGTH"]) == 8192, "the window Ollama runs"


def test_compose_vllm_lets_the_proxy_read_the_window() -> None:
    services = compose(COMPOSE_FILES[1])["services"]
    assert services["vllm"]["image"].startswith("vllm/vllm-openai:")
    assert services["proxy"]["environment"]["COMPACT_WINDOW"] == "auto"
    assert "--max-model-len" in services["vllm"]["command"]


def compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


@pytest.mark.process
@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_config_accepts_the_file(path: Path, tmp_path: Path) -> None:
    command = compose_command()
    if command is None:
        pytest.skip("no compose client (docker compose, or Debian's docker-compose)")
    target = path
    if command[0].endswith("docker-compose"):
        # Compose v1 (1.29) predates the top-level `name:` of the Compose Specification.
        target = tmp_path / path.name
        target.write_text(re.sub(r"(?m)^name:.*\n", "", path.read_text()))
    result = subprocess.run(
        [*command, "--project-directory", str(path.parent), "-f", str(target), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# --- Kubernetes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [OLDEST_KUBERNETES, "latest"])
def test_kubernetes_manifests_match_the_api_schemas(version: str) -> None:
    validate = pytest.importorskip(
        "kubernetes_validate", reason="pip install -e '.[dev]' (kubernetes-validate)"
    )
    from kubernetes_validate.utils import latest_version

    for path, doc in kube_docs():
        try:
            validate.validate(doc, latest_version() if version == "latest" else version, strict=True)
        except validate.ValidationError as exc:
            pytest.fail(f"{path.name} {doc['kind']}/{doc['metadata']['name']}: {exc.message} at {exc.path}")


def test_kubernetes_selectors_match_their_pods() -> None:
    docs = [doc for _, doc in kube_docs()]
    pods = [doc["spec"]["template"]["metadata"]["labels"] for doc in docs if doc["kind"] == "Deployment"]
    for doc in docs:
        selector = {
            "Deployment": lambda d: d["spec"]["selector"]["matchLabels"],
            "Service": lambda d: d["spec"]["selector"],
            "PodDisruptionBudget": lambda d: d["spec"]["selector"]["matchLabels"],
            "NetworkPolicy": lambda d: d["spec"]["podSelector"]["matchLabels"],
        }.get(doc["kind"])
        if selector:
            wanted = selector(doc).items()
            assert any(wanted <= labels.items() for labels in pods), (
                f"{doc['kind']}/{doc['metadata']['name']}"
            )


def test_every_proxy_container_is_probed_non_root_read_only_and_bounded() -> None:
    found = proxy_containers()
    assert len(found) == 2, "one in sidecar.yaml, one in replicas.yaml"
    for pod, container in found:
        probes = {kind: yaml.safe_dump(container[kind]) for kind in ("livenessProbe", "readinessProbe")}
        assert "/healthz" in probes["livenessProbe"] and "/readyz" in probes["readinessProbe"]
        assert "/healthz" in yaml.safe_dump(container["startupProbe"])
        security = {**pod.get("securityContext", {}), **container["securityContext"]}
        assert security["runAsNonRoot"] is True and security["runAsUser"] == 10001
        assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
        assert "memory" in container["resources"]["limits"]
        argv = [
            *container.get("command", ["compacting-proxy", "--port", str(PROXY_PORT)]),
            *container["args"],
        ]
        assert argv[argv.index("--port") + 1] == str(PROXY_PORT)
        ports = [p["containerPort"] for p in container.get("ports", [])]
        assert ports in ([], [PROXY_PORT])
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        drain = float(pre_stop[1]) if pre_stop[:1] == ["sleep"] else 0.0
        assert pod["terminationGracePeriodSeconds"] > drain + graceful_timeout(argv)


def test_sidecar_app_talks_to_the_proxy_on_localhost() -> None:
    ((_, pod),) = [(n, p) for n, p in pod_specs() if n == "chat-app"]
    (proxy,) = [c for c in pod["initContainers"] if "compacting-proxy" in c["image"]]
    assert proxy["restartPolicy"] == "Always", "a native sidecar: up before the app, down after it"
    assert proxy["command"][proxy["command"].index("--host") + 1] == "127.0.0.1", (
        "reachable from the pod only"
    )
    assert all("exec" in proxy[k] for k in ("startupProbe", "livenessProbe", "readinessProbe"))
    (app,) = pod["containers"]
    assert env_of(app)["OPENAI_BASE_URL"]["value"] == f"http://localhost:{PROXY_PORT}/v1"


def test_replicas_share_a_redis_cache_and_take_keys_from_a_secret() -> None:
    docs = {(doc["kind"], doc["metadata"]["name"]): doc for doc in load(KUBE_FILES[1])}
    deployment = docs[("Deployment", "compacting-proxy")]
    assert deployment["spec"]["replicas"] == 3
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (source,) = container["envFrom"]
    config = docs[("ConfigMap", source["configMapRef"]["name"])]["data"]
    assert config["COMPACT_CACHE_URL"] == "redis://redis:6379/0" and config["COMPACT_SUMMARIZE"] == "true"
    redis_service = docs[("Service", "redis")]
    assert [p["port"] for p in redis_service["spec"]["ports"]] == [6379]
    assert docs[("Deployment", "redis")]["spec"]["template"]["spec"]["containers"][0]["image"].startswith(
        "redis:"
    )
    env = env_of(container)
    for name in ("COMPACT_UPSTREAM_API_KEY", "COMPACT_API_KEYS"):
        assert "secretKeyRef" in env[name]["valueFrom"], f"{name} comes from a Secret"
        assert name not in config, f"{name} is a secret, not ConfigMap data"
    service = docs[("Service", "compacting-proxy")]
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(PROXY_PORT, "http")]
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [("http", PROXY_PORT)]
    assert ("PodDisruptionBudget", "compacting-proxy") in docs


def test_replicas_scale_on_cpu_keep_two_through_disruptions_and_share_what_they_learn() -> None:
    docs = {(doc["kind"], doc["metadata"]["name"]): doc for doc in load(KUBE_FILES[1])}
    deployment = docs[("Deployment", "compacting-proxy")]
    hpa = docs[("HorizontalPodAutoscaler", "compacting-proxy")]["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "compacting-proxy",
    }
    assert (
        hpa["minReplicas"] >= deployment["spec"]["replicas"] - 1 and hpa["maxReplicas"] > hpa["minReplicas"]
    )
    ((metric),) = hpa["metrics"]
    assert metric["resource"]["name"] == "cpu" and metric["resource"]["target"]["type"] == "Utilization"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "cpu" in container["resources"]["requests"], "utilization is relative to the request"
    assert "cpu" not in container["resources"].get("limits", {}), "a CPU limit throttles; the HPA scales"
    pdb = docs[("PodDisruptionBudget", "compacting-proxy")]["spec"]
    assert pdb["minAvailable"] < hpa["minReplicas"], "a node can always be drained"
    config = docs[("ConfigMap", "compacting-proxy")]["data"]
    assert config["COMPACT_CACHE_URL"].startswith("redis://")
    assert (
        Settings(**{"ready_needs_upstream": config["COMPACT_READY_NEEDS_UPSTREAM"]}).ready_needs_upstream
        is False
    )


def test_kubernetes_images_are_pinned() -> None:
    for _, pod in pod_specs():
        for c in containers(pod):
            assert ":" in c["image"] and not c["image"].endswith(":latest"), c["image"]
