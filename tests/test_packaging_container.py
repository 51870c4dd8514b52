"""The container image and the Helm chart, checked without docker or a cluster.

``docker build`` cannot run here, so the Dockerfile is parsed: a non-root user, a
healthcheck on ``/readyz`` at a listener the bundled configuration has, tini as PID
1 running ``cronstable run`` on the daemon's default configuration path, and the
image's directories equal to the daemon's defaults.

The chart is linted and rendered by Helm itself (the ``helm`` program, or the
``helm-python-sdk`` package, which carries Helm's Go library) for the ConfigMap
source and the git source; the manifests are checked for the fields Kubernetes
requires and for what the daemon needs, and the ConfigMap's files are validated by
``cronstable validate``.  Without Helm these tests are skipped, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import cronstable
from cronstable import platform
from cronstable.sources.factory import default_cache_dir

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "Dockerfile"
CHART = REPO / "packaging" / "helm" / "cronstable"


# ------------------------------------------------------------------ the Dockerfile


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, continuations joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            word, _, rest = whole.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def final_stage(steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last:]


def one(stage: list[tuple[str, str]], word: str) -> str:
    values = [rest for w, rest in stage if w == word]
    assert len(values) == 1, (word, values)
    return values[0]


@pytest.fixture(scope="module")
def image() -> list[tuple[str, str]]:
    return final_stage(instructions(DOCKERFILE.read_text()))


def test_the_image_runs_as_a_numbered_non_root_user(image: list[tuple[str, str]]) -> None:
    user = one(image, "USER")
    args = dict(a.split("=", 1) for w, a in image if w == "ARG" and "=" in a)
    name = user.split(":")[0]
    resolved = args.get(name.strip("${}"), name) if name.startswith("$") else name
    assert resolved.isdigit() and int(resolved) != 0, user  # runAsNonRoot can check a number


def test_the_healthcheck_asks_readyz_of_a_listener_the_bundled_config_has(
    image: list[tuple[str, str]],
) -> None:
    check = one(image, "HEALTHCHECK")
    assert "CMD" in check and "/readyz" in check
    command = json.loads(check[check.index("CMD") + 3 :].strip())
    url = next(part for part in command[-1].split("'") if part.startswith("http://"))
    assert url.endswith("/readyz")
    # the bundled example repository is the default configuration: it listens there
    bundled = yaml.safe_load((REPO / "examples" / "gitops-repo" / "cronstable.yaml").read_text())
    assert url.removesuffix("/readyz") in bundled["web"]["listen"]


def test_tini_runs_the_daemon_on_the_default_config_path(image: list[tuple[str, str]]) -> None:
    assert json.loads(one(image, "ENTRYPOINT")) == ["/usr/bin/tini", "--", "cronstable"]
    assert json.loads(one(image, "CMD")) == ["run", platform.DEFAULT_CONFIG_PATH]
    copies = [rest.split() for w, rest in image if w == "COPY"]
    assert any(c[-2:] == ["examples/gitops-repo", platform.DEFAULT_CONFIG_PATH] for c in copies)
    installs = " ".join(rest for w, rest in image if w == "RUN")
    assert "tini" in installs and "cronstable[speedups,mcp]" in installs


def test_the_image_directories_are_the_daemons_defaults(
    image: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        k: v
        for w, rest in image
        if w == "ENV"
        for k, _, v in (item.partition("=") for item in shlex.split(rest))
    }
    monkeypatch.setattr(os, "geteuid", lambda: 10001)
    for name in ("XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"):
        monkeypatch.setenv(name, env[name])
    assert platform.default_state_dir() == "/var/lib/cronstable"
    assert str(default_cache_dir()) == "/var/cache/cronstable"
    assert platform.default_api_sockets() == ["/run/cronstable/cronstable.sock"]


def test_the_build_context_keeps_what_the_dockerfile_copies() -> None:
    kept = {
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for word, rest in instructions(DOCKERFILE.read_text()):
        if word != "COPY" or "--from" in rest:
            continue
        sources = [s for s in rest.split()[:-1] if not s.startswith("--")]
        for source in sources:
            assert source.rstrip("/") in kept, source
            assert (REPO / source).exists(), source


# ------------------------------------------------------------------ the chart


def helm_backend() -> str | None:
    if shutil.which("helm"):
        return "binary"
    if importlib.util.find_spec("helm_python") is not None:
        return "sdk"
    return None


HELM = helm_backend()
needs_helm = pytest.mark.skipif(
    HELM is None,
    reason="helm is not installed (the helm program, or pip install helm-python-sdk)",
)


def lint(values: dict[str, Any], tmp_path: Path) -> list[str]:
    """Helm's lint errors for the chart with ``values``."""
    if HELM == "binary":
        file = tmp_path / "lint-values.yaml"
        file.write_text(yaml.safe_dump(values))
        done = subprocess.run(
            ["helm", "lint", "--strict", str(CHART), "-f", str(file)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return [] if done.returncode == 0 else [done.stdout + done.stderr]
    import helm_python

    report = helm_python.lint(str(CHART), values=values, strict=True)
    return [str(e) for e in report["errors"]] + [
        m["error"] for m in report["messages"] if m["severity"] > 1
    ]


def render(values: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    """``helm template`` of the chart as release ``demo`` in namespace ``ops``."""
    if HELM == "binary":
        file = tmp_path / "values.yaml"
        file.write_text(yaml.safe_dump(values))
        done = subprocess.run(
            ["helm", "template", "demo", str(CHART), "-n", "ops", "-f", str(file)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        texts = [done.stdout]
    else:
        import helm_python

        with helm_python.Chart.load(str(CHART)) as chart:
            texts = list(chart.render(values, name="demo", namespace="ops").values())
    return [doc for text in texts for doc in yaml.safe_load_all(text) if doc]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        kinds.setdefault(doc["kind"], []).append(doc)
    return kinds


GIT_VALUES: dict[str, Any] = {
    "source": {
        "type": "git",
        "git": {
            "url": "ssh://git@git.example/ops/cron.git",
            "ref": "main",
            "path": "prod",
            "deployKey": {"privateKey": "KEY", "knownHosts": "git.example ssh-ed25519 AAAA"},
        },
    },
    "serviceMonitor": {"enabled": True},
    "persistence": {"enabled": True, "size": "2Gi"},
    "replicaCount": 2,
}


def check_common(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    for doc in docs:
        assert doc["apiVersion"] and doc["kind"], doc
        assert doc["metadata"]["name"] and doc["metadata"]["namespace"] == "ops", doc
    kinds = by_kind(docs)
    (role,) = kinds["Role"]
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "create", "update", "delete"],
        }
    ]
    (binding,) = kinds["RoleBinding"]
    (account,) = kinds["ServiceAccount"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "ops"}
    ]
    (workload,) = kinds["StatefulSet"]
    spec = workload["spec"]
    pod = spec["template"]["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["CRONSTABLE_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert {"/var/lib/cronstable", "/var/cache/cronstable", "/run/cronstable"} <= set(mounts)
    volumes = {v["name"] for v in pod["volumes"]} | {
        c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])
    }
    assert set(mounts.values()) <= volumes
    services = {s["metadata"]["name"]: s for s in kinds["Service"]}
    assert spec["serviceName"] in services
    return kinds


@needs_helm
@pytest.mark.parametrize("values", [{}, GIT_VALUES], ids=["configmap", "git"])
def test_helm_lint_passes(values: dict[str, Any], tmp_path: Path) -> None:
    assert lint(values, tmp_path) == []


@needs_helm
def test_the_default_values_mount_a_configmap_the_daemon_accepts(tmp_path: Path) -> None:
    kinds = check_common(render({}, tmp_path))
    (config,) = kinds["ConfigMap"]
    (workload,) = kinds["StatefulSet"]
    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["run", platform.DEFAULT_CONFIG_PATH]
    assert {"name": "config", "mountPath": platform.DEFAULT_CONFIG_PATH, "readOnly": True} in (
        container["volumeMounts"]
    )
    assert {"name": "config", "configMap": {"name": config["metadata"]["name"]}} in pod["volumes"]
    assert "Secret" not in kinds and "ServiceMonitor" not in kinds
    # the files are a configuration `cronstable validate` accepts, listening on the port
    directory = tmp_path / "conf"
    directory.mkdir()
    for name, text in config["data"].items():
        (directory / name).write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "cronstable", "validate", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    listen = yaml.safe_load(config["data"]["cronstable.yaml"])["web"]["listen"]
    assert f"http://0.0.0.0:{container['ports'][0]['containerPort']}" in listen
    assert workload["metadata"]["labels"]["app.kubernetes.io/version"] == cronstable.__version__


@needs_helm
def test_the_git_values_fetch_with_the_deploy_key(tmp_path: Path) -> None:
    kinds = check_common(render(GIT_VALUES, tmp_path))
    assert "ConfigMap" not in kinds
    (secret,) = kinds["Secret"]
    assert secret["stringData"] == {
        "ssh-privatekey": "KEY",
        "known_hosts": "git.example ssh-ed25519 AAAA",
    }
    (workload,) = kinds["StatefulSet"]
    assert workload["spec"]["replicas"] == 2
    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == [
        "run",
        "--source",
        "git+ssh://git@git.example/ops/cron.git?ref=main&interval=60&path=prod",
    ]
    ssh = {e["name"]: e.get("value") for e in container["env"]}["GIT_SSH_COMMAND"]
    assert "-i /etc/cronstable/deploy-key/ssh-privatekey" in ssh
    assert "UserKnownHostsFile=/etc/cronstable/deploy-key/known_hosts" in ssh
    assert "BatchMode=yes" in ssh and "StrictHostKeyChecking=yes" in ssh
    key_volume = next(v for v in pod["volumes"] if v["name"] == "deploy-key")
    assert key_volume["secret"] == {"secretName": secret["metadata"]["name"], "defaultMode": 0o440}
    # the spec is one the daemon parses
    from cronstable.sources.git.spec import parse_git_spec

    spec = parse_git_spec(container["args"][2])
    assert (spec.url, spec.ref, spec.path) == ("ssh://git@git.example/ops/cron.git", "main", "prod")
    (claim,) = workload["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert not any(v["name"] == "data" for v in pod["volumes"])  # the claim, not an emptyDir
    (monitor,) = kinds["ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] == "http"
    # it selects the API Service alone, not the pods' headless one (no double scrape)
    matched = [
        s
        for s in kinds["Service"]
        if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    assert len(matched) == 1 and matched[0]["spec"].get("clusterIP") != "None"


@needs_helm
def test_the_git_source_without_a_url_or_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="source.git.url is required"):
        render({"source": {"type": "git"}}, tmp_path)
