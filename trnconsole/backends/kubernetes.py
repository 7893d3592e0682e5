"""Kubernetes and EKS jobs: an indexed batch/v1 Job whose pods meet through a headless Service for torchrun's
rendezvous, the source in a ConfigMap, Neuron and EFA devices from the device plugins, the pods' logs as the
run's log.

The `kubernetes` client is imported inside the functions that use it: the console starts without it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import queue
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from ..core.errors import UsageError
from ..core.spec import RunSpec
from ..core.store import RunRecord
from .aws import backoff_s, one_line
from .base import RUN_DIR_ENV, Backend, RunStatus, Submission
from .options import K8S, int_option, neuron_devices
from .package import PUBLIC_NEURON_IMAGE, Source, bootstrap_command, package_source

T = TypeVar("T")

MANAGED_BY = "app.kubernetes.io/managed-by"
RUN_ID_LABEL = "trnconsole/run-id"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
NEURON = "aws.amazon.com/neuron"
EFA = "vpc.amazonaws.com/efa"
CONTAINER = "train"
SOURCE_KEY = "sourcedir.tar.gz"
SOURCE_MOUNT = "/opt/trnconsole/source"
SHARED_MOUNT = "/shared"
DEFAULT_COMPILE_CACHE = f"{SHARED_MOUNT}/neuron-compile-cache"
MASTER_PORT = 29500
SCHEDULERS = ("volcano",)
VOLCANO_GROUP, VOLCANO_VERSION, PODGROUPS = "scheduling.volcano.sh", "v1beta1", "podgroups"
# The API server refuses a ConfigMap holding more than 1 MiB of data.
MAX_SOURCE_BYTES = 1 << 20
# Pods of an indexed Job are named for hosts `<job>-<index>`, which must fit a 63-character DNS label.
MAX_JOB_NAME = 52
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$")

CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
ATTEMPTS = 6
# A log read that keeps failing (a node that stopped answering) is tried again on the next poll anyway.
LOG_ATTEMPTS = 3
# Once the Job has ended, a pod whose log stream broke this many times in a row is given up on.
FOLLOW_GIVE_UP = 5
# A pod watch asks the server to end it after this long; the watcher then resumes from where it was.
WATCH_TIMEOUT_S = 30
# A watcher nobody asked for pods this long ends after its current watch; the next status() starts another.
WATCH_IDLE_S = 300
# A followed log with no line for this long is reopened from the cursor, so a dead connection cannot hang it.
FOLLOW_IDLE_S = 60
LOG_LIMIT_BYTES = 8 << 20
POOL_SIZE = 64  # one connection per followed pod, without urllib3 discarding and warning

PULL_FAILURES = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull")
START_FAILURES = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
ENDED_PHASES = ("Succeeded", "Failed")

NO_KUBERNETES = "the kubernetes package is not installed: pip install trnconsole[k8s]"
NO_CONFIG = (
    "kubeconfig: none found (no --kubeconfig, KUBECONFIG unset, no ~/.kube/config, not inside a cluster); "
    "run `aws eks update-kubeconfig --name CLUSTER` or pass --kubeconfig FILE"
)
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


# ---- which cluster ----


@dataclass(frozen=True)
class KubeTarget:
    """A cluster and namespace, resolved from the options and the kubeconfig without a request."""

    kubeconfig: str | None  # one file or several joined with os.pathsep; None: the pod's service account
    context: str | None
    namespace: str


def kube_target(options: Mapping[str, str]) -> KubeTarget:
    """The kubeconfig option, else KUBECONFIG, else ~/.kube/config, with the context option or the current
    context; inside a pod with none of those, its service account. Namespace: the option, else the
    context's, else "default"."""
    given = (options.get("kubeconfig") or "").strip()
    namespace = (options.get("namespace") or "").strip()
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise UsageError(f"--kubeconfig {given}: no such file")
        files, where = [str(path.resolve())], f"--kubeconfig {given}"
    else:
        env = os.environ.get("KUBECONFIG", "")
        candidates = [Path(p).expanduser() for p in (env or "~/.kube/config").split(os.pathsep) if p]
        files = [str(p.resolve()) for p in candidates if p.is_file()]
        where = f"KUBECONFIG {env}" if env else "~/.kube/config"
    if not files:
        if _in_cluster() and not options.get("context"):
            return KubeTarget(None, None, namespace or _pod_namespace())
        raise UsageError(NO_CONFIG)
    try:
        contexts, current = _contexts(files)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{where}: not a usable kubeconfig ({_short(str(exc))}); fix it or pass --kubeconfig"
        ) from None
    if not contexts:
        raise UsageError(
            f"{where}: no contexts in it; run `aws eks update-kubeconfig --name CLUSTER` "
            "or pass --kubeconfig FILE"
        )
    names = [str(c.get("name")) for c in contexts]
    wanted = (options.get("context") or "").strip() or current
    if not wanted:
        raise UsageError(
            f"{where}: no current context; pass --context NAME ({', '.join(names)}) "
            "or run `kubectl config use-context NAME`"
        )
    entry = next((c for c in contexts if c.get("name") == wanted), None)
    if entry is None:
        raise UsageError(f"--context {wanted}: not in {where}; it has {', '.join(names)}")
    namespace = namespace or (entry.get("context") or {}).get("namespace") or "default"
    return KubeTarget(os.pathsep.join(files), wanted, namespace)


def _contexts(files: list[str]) -> tuple[list[dict[str, Any]], str]:
    """The contexts of the kubeconfig files and the current one, merged as kubectl does: the first file
    to name a context or a current context wins."""
    try:
        import yaml
    except ImportError as exc:
        raise UsageError(NO_KUBERNETES) from exc
    contexts: dict[str, dict[str, Any]] = {}
    current = ""
    for file in files:
        try:
            data = yaml.safe_load(Path(file).read_text()) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{file}: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{file}: not a kubeconfig mapping")
        current = current or str(data.get("current-context") or "")
        for entry in data.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name"):
                contexts.setdefault(str(entry["name"]), entry)
    return list(contexts.values()), current


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT / "token").is_file()


def _pod_namespace() -> str:
    try:
        return (SERVICE_ACCOUNT / "namespace").read_text().strip() or "default"
    except OSError:
        return "default"


def load_client(kubeconfig: str | None, context: str | None) -> Any:
    """A kubernetes ApiClient for the kubeconfig's context, or for the pod's service account."""
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise UsageError(NO_KUBERNETES) from exc
    configuration = client.Configuration()
    try:
        if kubeconfig is None:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except config.ConfigException as exc:
        where = f"context {context} of {kubeconfig}" if kubeconfig else "the pod's service account"
        raise UsageError(f"Kubernetes configuration ({where}): {_short(str(exc))}") from None
    # Our kube_call retries with backoff; urllib3's own silent retries would multiply every attempt.
    configuration.retries = 0
    configuration.connection_pool_maxsize = POOL_SIZE
    return client.ApiClient(configuration)


# ---- calls that survive a busy API server ----


def kube_call(
    fn: Callable[..., T],
    *args: Any,
    verb: str,
    resource: str,
    namespace: str,
    context: str,
    attempts: int = ATTEMPTS,
    base_s: float = 0.5,
    cap_s: float = 20.0,
    sleep: Callable[[float], Any] = time.sleep,
    passthrough: tuple[int, ...] = (),
    **kwargs: Any,
) -> T:
    """fn(*args, **kwargs), retried with jittered backoff on 429, 5xx and connection errors.

    `verb`, `resource` and `namespace` name the request in messages ("create jobs in namespace ml"). An
    ApiException whose status is in `passthrough` is raised unchanged; every other failure becomes a
    one-line UsageError.
    """
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    kwargs.setdefault("_request_timeout", (CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
    what = f"{verb} {resource} in namespace {namespace}"
    attempts = max(1, attempts)
    for attempt in range(attempts):
        last = attempt == attempts - 1
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            status = int(exc.status or 0)
            if status in passthrough:
                raise
            message = api_message(exc)
            refused = refusal(exc, verb, resource, namespace, context)
            if refused is not None:
                raise refused from None
            if status == 0:  # raised by the client itself, e.g. for a TLS failure
                raise UsageError(f"Kubernetes API of context {context}: {message}") from None
            if not (status == 429 or status >= 500):
                raise UsageError(f"Kubernetes {what} failed: {status} {message}") from None
            if last:
                raise UsageError(
                    f"Kubernetes {what} failed after {attempts} attempts: {status} {message}; "
                    "the API server is overloaded or unavailable, try again later"
                ) from None
            delay = max(backoff_s(attempt, base_s, cap_s), _retry_after(exc, cap_s))
        except HTTPError as exc:
            if last:
                raise UsageError(
                    f"Kubernetes API of context {context}: cannot reach it after {attempts} attempts to "
                    f"{what} ({_short(str(exc))}); check the network and the server in the kubeconfig"
                ) from None
            delay = backoff_s(attempt, base_s, cap_s)
        sleep(delay)
    raise AssertionError("unreachable")  # the last attempt returns or raises


def refusal(exc: Any, verb: str, resource: str, namespace: str, context: str) -> UsageError | None:
    """The one line for a 403 (RBAC) or a 401 (stale credentials); None for any other answer."""
    what = f"{verb} {resource} in namespace {namespace}"
    if exc.status == 403:
        return UsageError(
            f"Kubernetes denied {what}: {api_message(exc)}; ask the cluster admin to allow it "
            f"(`kubectl auth can-i {verb} {resource} -n {namespace}`)"
        )
    if exc.status == 401:
        return UsageError(
            f"Kubernetes rejected the credentials of context {context} to {what}; refresh them "
            "(on EKS: `aws eks update-kubeconfig --name CLUSTER`)"
        )
    return None


def api_message(exc: Any) -> str:
    """The message of the Status object the API server answered with, else the HTTP reason."""
    try:
        body = json.loads(exc.body or b"")
        message = body.get("message") if isinstance(body, dict) else None
    except (TypeError, ValueError):
        message = None
    return _short(str(message or exc.reason or "no message"))


def _retry_after(exc: Any, cap_s: float) -> float:
    try:
        return min(cap_s, float((exc.headers or {}).get("Retry-After", 0)))
    except (TypeError, ValueError):
        return 0.0


def _short(text: str, limit: int = 300) -> str:
    text = one_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Cluster:
    """One cluster's ApiClient and its API groups; every call goes through kube_call."""

    def __init__(self, api_client: Any, context: str | None, base_s: float) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.context = context or "in-cluster"
        self.base_s = base_s

    def call(
        self, fn: Callable[..., T], *args: Any, verb: str, resource: str, namespace: str, **kw: Any
    ) -> T:
        return kube_call(
            fn,
            *args,
            verb=verb,
            resource=resource,
            namespace=namespace,
            context=self.context,
            base_s=self.base_s,
            **kw,
        )

    def pods(self, namespace: str, job: str) -> Any:
        return self.call(
            self.core.list_namespaced_pod,
            namespace,
            label_selector=f"job-name={job}",
            verb="list",
            resource="pods",
            namespace=namespace,
        )


def pod_log_request(
    api_client: Any,
    namespace: str,
    pod: str,
    *,
    since: str | None = None,
    follow: bool = False,
    limit_bytes: int | None = None,
    _request_timeout: Any = None,
) -> Any:
    """GET the pod's log with timestamps, as an unread urllib3 response.

    The generated read_namespaced_pod_log has no sinceTime (kubernetes-client/python#1351: the API's
    OpenAPI document omits it), so the same endpoint is called through the ApiClient with it.
    """
    query: list[tuple[str, str]] = [("container", CONTAINER), ("timestamps", "true")]
    if since:
        query.append(("sinceTime", since))
    if follow:
        query.append(("follow", "true"))
    if limit_bytes:
        query.append(("limitBytes", str(limit_bytes)))
    return api_client.call_api(
        "/api/v1/namespaces/{namespace}/pods/{name}/log",
        "GET",
        path_params={"namespace": namespace, "name": pod},
        query_params=query,
        header_params={"Accept": "text/plain"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=_request_timeout,
    )


# ---- names and manifests ----


def job_name(spec: RunSpec, run_id: str) -> str:
    """`<name or runner>-<run id>` as a DNS label that can also name the Service and the pods' hosts."""
    label = (spec.name or spec.runner_label).lower()
    label = label.removesuffix(".py")
    base = re.sub(r"[^a-z0-9]+", "-", label).strip("-")
    rid = re.sub(r"[^a-z0-9]+", "-", run_id.lower()).strip("-")[: MAX_JOB_NAME - 4] or "run"
    if not base[:1].isalpha():
        base = f"trn-{base}".rstrip("-")
    base = base[: MAX_JOB_NAME - len(rid) - 1].rstrip("-")
    return f"{base}-{rid}"


def label_value(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")


def quantity_option(options: Mapping[str, str], key: str, default: str, example: str) -> str:
    value = (options.get(key) or "").strip() or default
    if not QUANTITY.match(value):
        raise UsageError(f"--{key} {value}: not a Kubernetes quantity; write it like --{key} {example}")
    return value


def scheduler_option(options: Mapping[str, str]) -> str | None:
    value = (options.get("scheduler") or "").strip()
    if value and value not in SCHEDULERS:
        raise UsageError(
            f"--scheduler {value}: not supported; use --scheduler volcano, or leave it out for the "
            "cluster's default scheduler"
        )
    return value or None


def name_option(options: Mapping[str, str], key: str, pattern: re.Pattern[str], limit: int) -> str | None:
    value = (options.get(key) or "").strip()
    if value and (len(value) > limit or not pattern.match(value)):
        raise UsageError(
            f"--{key.replace('_', '-')} {value}: not a Kubernetes name; use lower-case letters, digits "
            f"and '-' (at most {limit} characters)"
        )
    return value or None


@dataclass(frozen=True)
class Manifests:
    """What one run creates: the Job, the Service its pods meet through, the source, a Volcano PodGroup."""

    job: dict[str, Any]
    service: dict[str, Any]
    configmap: dict[str, Any]
    podgroup: dict[str, Any] | None


def manifests(record: RunRecord, source: Source) -> Manifests:
    """The objects of a run; the Job is created suspended, the rest carry its ownerReference later."""
    spec = record.spec
    options = spec.backend_options
    job = job_name(spec, record.id)
    service = job
    configmap = f"{job}-source"
    nnodes = spec.nnodes
    pvc = name_option(options, "pvc", DNS_SUBDOMAIN, 253)
    scheduler = scheduler_option(options)
    devices = neuron_devices(options, spec.nproc)
    efa = int_option(options, "efa", 0)
    labels = {MANAGED_BY: "trnconsole", RUN_ID_LABEL: label_value(record.id)}
    output_dir = f"{SHARED_MOUNT}/trnconsole/{record.id}" if pvc else f"/tmp/trnconsole/{record.id}"
    command = bootstrap_command(f"{SOURCE_MOUNT}/{SOURCE_KEY}", spec, source.entry_point, output_dir)

    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    if efa:
        # What the AWS samples set for collectives over EFA on trn1; a user's --env wins.
        env.update(FI_PROVIDER="efa", FI_EFA_USE_DEVICE_RDMA="1", FI_EFA_FORK_SAFE="1")
    if pvc:
        env["NEURON_COMPILE_CACHE_URL"] = DEFAULT_COMPILE_CACHE
    env.update(spec.env)
    if (options.get("compile_cache") or "").strip():
        env["NEURON_COMPILE_CACHE_URL"] = options["compile_cache"].strip()
    if (options.get("neuron_cc_flags") or "").strip():
        env["NEURON_CC_FLAGS"] = options["neuron_cc_flags"].strip()
    env.update(
        NEURON_PROCESS_TAG=record.id,
        TRNCONSOLE_RUN_ID=record.id,
        TRNCONSOLE_MASTER_ADDR=f"{job}-0.{service}",
        TRNCONSOLE_MASTER_PORT=str(MASTER_PORT),
    )
    env[RUN_DIR_ENV] = output_dir  # on the shared volume when there is one

    limits = {}
    tolerations = []
    if devices:
        limits[NEURON] = str(devices)
        tolerations.append({"key": NEURON, "operator": "Exists", "effect": "NoSchedule"})
    if efa:
        limits[EFA] = str(efa)
        tolerations.append({"key": EFA, "operator": "Exists", "effect": "NoSchedule"})
    resources: dict[str, Any] = {
        "requests": {
            "cpu": quantity_option(options, "cpu", "4", "4 or 500m"),
            "memory": quantity_option(options, "memory", "16Gi", "16Gi"),
        }
    }
    if limits:
        resources["limits"] = limits
    volumes: list[dict[str, Any]] = [
        {"name": "source", "configMap": {"name": configmap}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},  # torch's workers share tensors through /dev/shm
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "source", "mountPath": SOURCE_MOUNT, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    if pvc:
        volumes.append({"name": "shared", "persistentVolumeClaim": {"claimName": pvc}})
        mounts.append({"name": "shared", "mountPath": SHARED_MOUNT})
    container = {
        "name": CONTAINER,
        "image": (options.get("image") or "").strip() or PUBLIC_NEURON_IMAGE,
        "command": command,
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "resources": resources,
        "ports": [{"name": "rendezvous", "containerPort": MASTER_PORT}],
        "volumeMounts": mounts,
    }
    pod_spec: dict[str, Any] = {
        "subdomain": service,
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": volumes,
    }
    if tolerations:
        pod_spec["tolerations"] = tolerations
    account = name_option(options, "service_account", DNS_SUBDOMAIN, 253)
    if account:
        pod_spec["serviceAccountName"] = account
    pod_annotations: dict[str, str] = {}
    podgroup = None
    if scheduler == "volcano":
        pod_spec["schedulerName"] = "volcano"
        pod_annotations[GROUP_ANNOTATION] = job
        podgroup = {
            "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": job, "labels": labels},
            "spec": {"minMember": nnodes},
        }
    job_body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job, "labels": labels, "annotations": {"trnconsole/runner": spec.runner_label}},
        "spec": {
            "completionMode": "Indexed",
            "completions": nnodes,
            "parallelism": nnodes,
            "backoffLimit": 0,
            # Started once the ConfigMap, Service and PodGroup exist and name the Job as their owner.
            "suspend": True,
            "template": {
                "metadata": {"labels": labels, "annotations": pod_annotations},
                "spec": pod_spec,
            },
        },
    }
    service_body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service, "labels": labels},
        "spec": {
            "clusterIP": "None",
            "selector": {"job-name": job},
            "ports": [
                {"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"}
            ],
            # Rank 0's name must resolve before it is Ready, or the other ranks cannot find it.
            "publishNotReadyAddresses": True,
        },
    }
    configmap_body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap,
            "labels": labels,
            "annotations": {"trnconsole/sha256": source.sha256},
        },
        "binaryData": {SOURCE_KEY: base64.b64encode(source.tarball).decode("ascii")},
        "immutable": True,
    }
    return Manifests(job=job_body, service=service_body, configmap=configmap_body, podgroup=podgroup)


# ---- pods ----


def _meta(obj: Any) -> dict[str, Any]:
    """Name, labels and uid of a model object or of a custom object's dict."""
    if isinstance(obj, dict):
        meta = obj.get("metadata") or {}
        return {"name": meta.get("name"), "labels": meta.get("labels") or {}, "uid": meta.get("uid")}
    return {"name": obj.metadata.name, "labels": obj.metadata.labels or {}, "uid": obj.metadata.uid}


def pod_rank(pod: Any) -> int:
    labels = pod.metadata.labels or {}
    annotations = pod.metadata.annotations or {}
    try:
        return int(labels.get(INDEX_LABEL) or annotations.get(INDEX_LABEL) or 0)
    except ValueError:
        return 0


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def container_started(pod: Any) -> bool:
    """Whether the container ran at all, so that it has a log to read."""
    for status in pod.status.container_statuses or []:
        state = status.state
        if state is not None and (state.running is not None or state.terminated is not None):
            return True
    return pod.status.phase in ("Running", *ENDED_PHASES)


def pod_facts(pod: Any) -> dict[str, Any]:
    statuses = pod.status.container_statuses or []
    facts: dict[str, Any] = {
        "name": pod.metadata.name,
        "index": pod_rank(pod),
        "phase": pod.status.phase,
        "node": pod.spec.node_name,
        "restarts": sum(s.restart_count or 0 for s in statuses),
    }
    for status in statuses:
        state = status.state
        if state is not None and state.waiting is not None and state.waiting.reason:
            facts["reason"] = state.waiting.reason
        elif state is not None and state.terminated is not None:
            facts["exit_code"] = state.terminated.exit_code
            facts["reason"] = state.terminated.reason
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            facts["reason"] = condition.reason
    return facts


def _requested(pod: Any) -> dict[str, str]:
    amounts: dict[str, str] = {}
    for container in pod.spec.containers or []:
        resources = container.resources
        if resources is not None:
            amounts.update(resources.requests or {})
            amounts.update(resources.limits or {})
    return amounts


def unschedulable_reason(message: str, pod: Any) -> str:
    """The scheduler's first sentence, led by the resource no node has free when that is the cause."""
    first = one_line(message).split(". ")[0].rstrip(".")
    requested = _requested(pod)
    for resource in (NEURON, EFA, "cpu", "memory"):
        if f"Insufficient {resource}" in message and resource in requested:
            return f"no node has {requested[resource]} {resource} free ({first})"
    return first


def pod_problem(pod: Any) -> str | None:
    """Why a pod is not running yet, when it is something the user must act on."""
    rank = pod_rank(pod)
    for condition in pod.status.conditions or []:
        if (
            condition.type == "PodScheduled"
            and condition.status == "False"
            and condition.reason == "Unschedulable"
        ):
            return f"rank {rank} cannot be scheduled: {unschedulable_reason(condition.message or '', pod)}"
    for status in pod.status.container_statuses or []:
        waiting = status.state.waiting if status.state is not None else None
        if waiting is None:
            continue
        detail = _short(waiting.message or "", 200)
        if waiting.reason in PULL_FAILURES:
            return f"rank {rank} cannot pull its image {status.image}: {waiting.reason}: {detail}".rstrip(
                ": "
            )
        if waiting.reason in START_FAILURES:
            return f"rank {rank} cannot start: {waiting.reason}: {detail}".rstrip(": ")
    return None


def failure_of(pods: list[Any], job: Any) -> tuple[int | None, str]:
    """The exit code and one line for a failed Job: the first rank whose container exited non-zero."""
    exits = []
    for pod in pods:
        for status in pod.status.container_statuses or []:
            ended = status.state.terminated if status.state is not None else None
            if ended is not None and ended.exit_code:
                finished = _epoch(ended.finished_at)
                exits.append((finished if finished is not None else math.inf, pod_rank(pod), pod, ended))
    if exits:
        _, rank, pod, ended = min(exits, key=lambda item: item[:2])
        where = f" on {pod.spec.node_name}" if pod.spec.node_name else ""
        message = f"rank {rank} ({pod.metadata.name}{where}) exited with code {ended.exit_code}"
        message += f" ({ended.reason or 'Error'})"
        if ended.message:
            message += f": {_short(ended.message, 200)}"
        return ended.exit_code, message
    for pod in sorted(pods, key=pod_rank):
        if pod.status.phase == "Failed" and pod.status.reason:
            reason = f"{pod.status.reason}: {_short(pod.status.message or '', 200)}".rstrip(": ")
            return None, f"rank {pod_rank(pod)} ({pod.metadata.name}) failed: {reason}"
    for condition in job.status.conditions or []:
        if condition.type == "Failed" and condition.status == "True":
            return None, f"the Job failed: {condition.reason}: {_short(condition.message or '', 200)}"
    return None, "the Job failed"


class _PodWatch:
    """A Job's pods as the API server reports them: listed once, then kept current by a watch thread."""

    def __init__(self, cluster: _Cluster, namespace: str, job: str, listing: Any) -> None:
        self._cluster = cluster
        self._namespace = namespace
        self._job = job
        self._lock = threading.Lock()
        self._pods = {pod.metadata.name: pod for pod in listing.items or []}
        self._version: str | None = listing.metadata.resource_version
        self._stopped = threading.Event()
        self._watch: Any = None
        self.failures = 0
        self.used = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"k8s-pods-{job}", daemon=True)
        self._thread.start()

    @property
    def healthy(self) -> bool:
        return self._thread.is_alive() and self.failures == 0

    def pods(self) -> list[Any]:
        self.used = time.monotonic()
        with self._lock:
            return sorted(self._pods.values(), key=pod_rank)

    def close(self) -> None:
        self._stopped.set()
        deadline = time.monotonic() + 2
        while self._thread.is_alive() and time.monotonic() < deadline:
            # Again and again: a watch whose request is still on its way has no connection to cut yet.
            if self._watch is not None:
                self._watch.stop()
            self._thread.join(timeout=0.05)

    def _run(self) -> None:
        from kubernetes import watch

        while not self._stopped.is_set() and time.monotonic() - self.used < WATCH_IDLE_S:
            try:
                if self._version is None:
                    self._relist()
                self._watch = watch.Watch()
                events = self._watch.stream(
                    self._cluster.core.list_namespaced_pod,
                    self._namespace,
                    label_selector=f"job-name={self._job}",
                    resource_version=self._version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_TIMEOUT_S,
                    _request_timeout=(CONNECT_TIMEOUT_S, WATCH_TIMEOUT_S + 15),
                )
                for event in events:
                    self._apply(event, self._watch.resource_version)
                    if self._stopped.is_set():
                        break
                self.failures = 0
            except Exception as exc:  # whatever went wrong, resync from a fresh list after a pause
                gone = getattr(exc, "status", None) == 410
                self._version = None
                self.failures = 0 if gone else self.failures + 1
                if not gone:
                    self._stopped.wait(backoff_s(self.failures, self._cluster.base_s, 30.0))

    def _relist(self) -> None:
        listing = self._cluster.core.list_namespaced_pod(
            self._namespace,
            label_selector=f"job-name={self._job}",
            _request_timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S),
        )
        with self._lock:
            self._pods = {pod.metadata.name: pod for pod in listing.items or []}
            self._version = listing.metadata.resource_version

    def _apply(self, event: dict[str, Any], version: str | None) -> None:
        pod = event.get("object")
        with self._lock:
            if event["type"] in ("ADDED", "MODIFIED") and pod is not None:
                self._pods[pod.metadata.name] = pod
            elif event["type"] == "DELETED" and pod is not None:
                self._pods.pop(pod.metadata.name, None)
            if version:
                self._version = version


# ---- logs ----


def parse_timestamp(text: str) -> int | None:
    """Nanoseconds since the epoch of an RFC3339 time (the kubelet drops trailing zeros of the fraction)."""
    match = RFC3339.match(text)
    if not match:
        return None
    day, clock, fraction, zone = match.groups()
    offset = "+00:00" if zone in ("Z", "z") else zone
    try:
        seconds = int(datetime.fromisoformat(f"{day}T{clock}{offset}").timestamp())
    except ValueError:
        return None
    return seconds * 1_000_000_000 + int((fraction or "0").ljust(9, "0"))


def since_time(ns: int) -> str:
    """sinceTime for lines at `ns`: RFC3339 in whole seconds, a second early, so no line at `ns` is cut."""
    seconds = ns // 1_000_000_000 - 1
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _PodCursor:
    """Where one pod's log was delivered up to: the last timestamp and how many lines carried exactly it.

    A read starts from a whole second before that timestamp; lines older than it are dropped, and of the
    lines carrying it exactly, as many as were delivered already.
    """

    def __init__(self, state: Mapping[str, Any] | None) -> None:
        state = state or {}
        self.stamp: str | None = state.get("ts")
        self.last = parse_timestamp(self.stamp) if self.stamp else None
        self.count = int(state.get("n") or 0) if self.last is not None else 0
        self._base: int | None = self.last
        self._skip = self.count

    def begin(self) -> str | None:
        """Start a read; the sinceTime to ask for."""
        self._base, self._skip = self.last, self.count
        return since_time(self.last) if self.last is not None else None

    def accept(self, ns: int, stamp: str) -> bool:
        """Whether a line of this read is new; if so it counts as delivered."""
        if self._base is not None:
            if ns < self._base:
                return False
            if ns == self._base and self._skip > 0:
                self._skip -= 1
                return False
        if self.last is None or ns > self.last:
            self.last, self.stamp, self.count = ns, stamp, 1
        elif ns == self.last:
            self.count += 1
        return True

    def state(self) -> dict[str, Any]:
        return {"ts": self.stamp, "n": self.count}


class _LogCursor:
    """The cursor of a run's logs: one _PodCursor per pod, as plain JSON {"pods": {name: {ts, n}}}."""

    def __init__(self, cursor: Mapping[str, Any] | None) -> None:
        pods = (cursor or {}).get("pods") or {}
        self.pods = {name: _PodCursor(state) for name, state in pods.items()}

    def pod(self, name: str) -> _PodCursor:
        return self.pods.setdefault(name, _PodCursor(None))

    def to_json(self) -> dict[str, Any]:
        return {"pods": {name: c.state() for name, c in sorted(self.pods.items()) if c.stamp}}


def split_stamp(line: str) -> tuple[int | None, str, str]:
    stamp, _, text = line.partition(" ")
    ns = parse_timestamp(stamp)
    if ns is None:
        return None, "", line.rstrip("\r")
    return ns, stamp, text.rstrip("\r")


def _tagged(entries: list[tuple[int, int, int, str]], several: bool) -> list[str]:
    entries.sort(key=lambda e: e[:3])
    return [f"[rank {rank}] {text}" if several else text for _, rank, _, text in entries]


def _not_started(exc: Any) -> bool:
    message = api_message(exc)
    return exc.status == 400 and ("waiting to start" in message or "ContainerCreating" in message)


class _LogStream:
    """A thread following one pod's log; its lines, then an end marker, go to the shared queue."""

    def __init__(
        self, cluster: _Cluster, namespace: str, pod: str, since: str | None, out: queue.Queue
    ) -> None:
        self.pod = pod
        self.finished = False  # set by the reader of `out` once it took the end marker
        self._cluster = cluster
        self._namespace = namespace
        self._since = since
        self._out = out
        self._response: Any = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"k8s-log-{pod}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        outcome: Any = "broken"
        try:
            self._response = pod_log_request(
                self._cluster.api_client,
                self._namespace,
                self.pod,
                since=self._since,
                follow=True,
                _request_timeout=(CONNECT_TIMEOUT_S, FOLLOW_IDLE_S),
            )
            for line in iter_resp_lines(self._response):
                if self._closed.is_set():
                    return
                self._out.put((self.pod, "line", line))
            outcome = "eof"
        except ApiException as exc:
            # Refused: the follower raises it. Anything else (not started yet, 5xx): reopened next poll.
            outcome = refusal(exc, "get", "pods/log", self._namespace, self._cluster.context) or outcome
        except Exception:  # the connection broke or timed out: the follower reopens it from the cursor
            pass
        finally:
            if self._response is not None:
                self._response.release_conn()
            self._out.put((self.pod, "end", outcome))

    def close(self) -> None:
        self._closed.set()
        response = self._response
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is not None:
            # Unblocks the thread's read at once; closing the response under it could wait for the read.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


# ---- the backend ----


class KubernetesBackend(Backend):
    """Runs on a Kubernetes cluster (EKS with trn1 nodes) as an indexed Job, one pod per node."""

    name = "k8s"
    remote = True
    options = frozenset(K8S)

    def __init__(
        self, factory: Callable[[str | None, str | None], Any] | None = None, *, retry_base_s: float = 0.5
    ) -> None:
        """`factory(kubeconfig, context)` makes an ApiClient (default: load_client); one is kept per pair."""
        self._factory = factory or load_client
        self._retry_base_s = retry_base_s
        self._lock = threading.Lock()
        self._clusters: dict[tuple[str | None, str | None], _Cluster] = {}
        self._watches: dict[tuple[Any, ...], _PodWatch] = {}

    def close(self) -> None:
        """End the pod watches and close the clients' connections."""
        with self._lock:
            watches, self._watches = list(self._watches.values()), {}
            clusters, self._clusters = list(self._clusters.values()), {}
        for watch in watches:
            watch.close()
        for cluster in clusters:
            cluster.api_client.close()

    def _cluster(self, kubeconfig: str | None, context: str | None) -> _Cluster:
        key = (kubeconfig, context)
        with self._lock:
            cluster = self._clusters.get(key)
        if cluster is None:
            cluster = _Cluster(self._factory(kubeconfig, context), context, self._retry_base_s)
            with self._lock:
                cluster = self._clusters.setdefault(key, cluster)
        return cluster

    def _handle(self, record: RunRecord) -> tuple[dict[str, Any], _Cluster]:
        handle = record.handle or {}
        if not handle.get("job"):
            raise UsageError(
                f"run {record.id}: no Kubernetes Job was recorded for it (its submit did not finish)"
            )
        return handle, self._cluster(handle.get("kubeconfig"), handle.get("context"))

    # ---- check ----

    def check(self, spec: RunSpec) -> None:
        options = spec.backend_options
        if spec.nnodes < 1:
            raise UsageError(f"--nnodes {spec.nnodes}: must be at least 1 (pods of the Job)")
        neuron_devices(options, spec.nproc)
        int_option(options, "efa", 0)
        scheduler_option(options)
        quantity_option(options, "cpu", "4", "4 or 500m")
        quantity_option(options, "memory", "16Gi", "16Gi")
        name_option(options, "namespace", DNS_LABEL, 63)
        name_option(options, "pvc", DNS_SUBDOMAIN, 253)
        name_option(options, "service_account", DNS_SUBDOMAIN, 253)
        image = options.get("image")
        if image is not None and (not image.strip() or any(c.isspace() for c in image.strip())):
            raise UsageError(f"--image {image!r}: not an image reference, e.g. --image {PUBLIC_NEURON_IMAGE}")
        kube_target(options)
        self._source(spec)

    def _source(self, spec: RunSpec) -> Source:
        source_dir = (spec.backend_options.get("source_dir") or "").strip() or None
        source = package_source(spec, source_dir)
        if len(source.tarball) > MAX_SOURCE_BYTES:
            where = f"--source-dir {source_dir}" if source_dir else f"RUNNER {spec.runner}"
            raise UsageError(
                f"{where}: the packaged source is {len(source.tarball) / (1 << 20):.1f} MiB, more than the "
                "1 MiB a ConfigMap holds; pass a --source-dir holding only the training code (data and "
                "checkpoints belong on the --pvc volume)"
            )
        return source

    # ---- submit ----

    def submit(self, record: RunRecord) -> Submission:
        spec = record.spec
        target = kube_target(spec.backend_options)
        cluster = self._cluster(target.kubeconfig, target.context)
        ns = target.namespace
        bodies = manifests(record, self._source(spec))
        job = bodies.job["metadata"]["name"]
        created = self._create(
            cluster,
            ns,
            "jobs",
            record.id,
            bodies.job,
            cluster.batch.create_namespaced_job,
            cluster.batch.read_namespaced_job,
        )
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": _meta(created)["uid"]}
        try:
            for body in (bodies.configmap, bodies.service, bodies.podgroup):
                if body is not None:
                    body["metadata"]["ownerReferences"] = [owner]
            self._create(
                cluster,
                ns,
                "configmaps",
                record.id,
                bodies.configmap,
                cluster.core.create_namespaced_config_map,
                cluster.core.read_namespaced_config_map,
            )
            self._create(
                cluster,
                ns,
                "services",
                record.id,
                bodies.service,
                cluster.core.create_namespaced_service,
                cluster.core.read_namespaced_service,
            )
            if bodies.podgroup is not None:
                self._create_podgroup(cluster, ns, record.id, bodies.podgroup)
            cluster.call(
                cluster.batch.patch_namespaced_job,
                job,
                ns,
                {"spec": {"suspend": False}},
                _content_type="application/merge-patch+json",
                verb="patch",
                resource="jobs",
                namespace=ns,
            )
        except BaseException:
            # The Job owns whatever was made so far: deleting it takes those along.
            self._delete(cluster, ns, "jobs", cluster.batch.delete_namespaced_job, job, quiet=True)
            raise
        handle = {
            "kubeconfig": target.kubeconfig,
            "context": target.context,
            "namespace": ns,
            "job": job,
            "service": bodies.service["metadata"]["name"],
            "configmap": bodies.configmap["metadata"]["name"],
            "podgroup": bodies.podgroup["metadata"]["name"] if bodies.podgroup else None,
            "nnodes": spec.nnodes,
        }
        return Submission(handle=handle, started_at=time.time())

    def _create(
        self,
        cluster: _Cluster,
        ns: str,
        resource: str,
        run_id: str,
        body: dict[str, Any],
        create: Callable[..., Any],
        read: Callable[..., Any],
    ) -> Any:
        """Create, or accept what an earlier attempt of this run created (a retried request can
        succeed twice: the second answer is AlreadyExists)."""
        from kubernetes.client.exceptions import ApiException

        name = body["metadata"]["name"]
        try:
            return cluster.call(
                create, ns, body, verb="create", resource=resource, namespace=ns, passthrough=(409,)
            )
        except ApiException:
            existing = cluster.call(read, name, ns, verb="get", resource=resource, namespace=ns)
            return self._ours(existing, resource, name, ns, run_id)

    def _create_podgroup(self, cluster: _Cluster, ns: str, run_id: str, body: dict[str, Any]) -> Any:
        from kubernetes.client.exceptions import ApiException

        resource = f"{PODGROUPS}.{VOLCANO_GROUP}"
        name = body["metadata"]["name"]
        group = (VOLCANO_GROUP, VOLCANO_VERSION, ns, PODGROUPS)
        try:
            return cluster.call(
                cluster.custom.create_namespaced_custom_object,
                *group,
                body,
                verb="create",
                resource=resource,
                namespace=ns,
                passthrough=(404, 409),
            )
        except ApiException as exc:
            if exc.status == 404:
                raise UsageError(
                    f"--scheduler volcano: the cluster has no {resource} resource; install Volcano, or leave "
                    "--scheduler out to use the default scheduler"
                ) from None
            existing = cluster.call(
                cluster.custom.get_namespaced_custom_object,
                *group,
                name,
                verb="get",
                resource=resource,
                namespace=ns,
            )
            return self._ours(existing, resource, name, ns, run_id)

    @staticmethod
    def _ours(existing: Any, resource: str, name: str, ns: str, run_id: str) -> Any:
        if _meta(existing)["labels"].get(RUN_ID_LABEL) == label_value(run_id):
            return existing
        raise UsageError(
            f"Kubernetes {resource} {name} already exists in namespace {ns} and is not this run's; "
            "delete it or launch with another --name"
        )

    def _delete(
        self,
        cluster: _Cluster,
        ns: str,
        resource: str,
        fn: Callable[..., Any],
        *args: Any,
        quiet: bool = False,
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        kwargs = {"propagation_policy": "Background"}
        try:
            cluster.call(
                fn, *args, ns, verb="delete", resource=resource, namespace=ns, passthrough=(404,), **kwargs
            )
        except ApiException:
            pass  # already gone
        except UsageError:
            if not quiet:
                raise

    # ---- status ----

    def status(self, record: RunRecord) -> RunStatus:

        handle, cluster = self._handle(record)
        ns, job = handle["namespace"], handle["job"]
        obj = _read_job(cluster, ns, job)
        if obj is None:
            self._forget(handle)
            detail = {"namespace": ns, "job": job, "phase": "Deleted"}
            if handle.get("stop_requested"):
                return RunStatus(
                    "stopped", ended_at=handle.get("stop_requested_at") or time.time(), detail=detail
                )
            message = f"the Job {job} is gone from namespace {ns}: it was deleted outside trnconsole"
            return RunStatus("lost", ended_at=time.time(), message=message, detail=detail)
        conditions = {c.type: c for c in obj.status.conditions or [] if c.status == "True"}
        ended = conditions.get("Complete") or conditions.get("Failed")
        if ended is not None:
            # The final facts come from a fresh list, not from a watch that may lag behind the Job.
            pods = sorted(cluster.pods(ns, job).items or [], key=pod_rank)
            self._forget(handle)
            detail = self._detail(handle, obj, pods)
            ended_at = _epoch(obj.status.completion_time if ended.type == "Complete" else None)
            ended_at = ended_at or _epoch(ended.last_transition_time) or time.time()
            if ended.type == "Complete":
                return RunStatus("completed", exit_code=0, ended_at=ended_at, detail=detail)
            exit_code, message = failure_of(pods, obj)
            return RunStatus("failed", exit_code=exit_code, ended_at=ended_at, message=message, detail=detail)
        pods = self._watched_pods(cluster, handle)
        detail = self._detail(handle, obj, pods)
        problem = next((p for p in map(pod_problem, pods) if p), None)
        if problem:
            detail["problem"] = problem
        stopping = handle.get("stop_requested") or obj.metadata.deletion_timestamp is not None
        return RunStatus("stopping" if stopping else "running", message=problem, detail=detail)

    def _watched_pods(self, cluster: _Cluster, handle: Mapping[str, Any]) -> list[Any]:
        key = (handle.get("kubeconfig"), handle.get("context"), handle["namespace"], handle["job"])
        with self._lock:
            watch = self._watches.get(key)
        if watch is not None and watch.healthy:
            return watch.pods()
        # No watch yet, or it keeps failing: list now, so that a real error reaches the caller.
        listing = cluster.pods(handle["namespace"], handle["job"])
        fresh = _PodWatch(cluster, handle["namespace"], handle["job"], listing)
        with self._lock:
            old, self._watches[key] = self._watches.get(key), fresh
        if old is not None:
            old.close()
        return sorted(listing.items or [], key=pod_rank)

    def _forget(self, handle: Mapping[str, Any]) -> None:
        key = (handle.get("kubeconfig"), handle.get("context"), handle["namespace"], handle["job"])
        with self._lock:
            watch = self._watches.pop(key, None)
        if watch is not None:
            watch.close()

    @staticmethod
    def _detail(handle: Mapping[str, Any], job: Any, pods: list[Any]) -> dict[str, Any]:
        status = job.status
        conditions = {c.type for c in status.conditions or [] if c.status == "True"}
        if "Complete" in conditions:
            phase = "Complete"
        elif "Failed" in conditions:
            phase = "Failed"
        elif job.spec.suspend:
            phase = "Suspended"
        elif any(p.status.phase == "Running" for p in pods):
            phase = "Running"
        else:
            phase = "Pending"
        return {
            "namespace": handle["namespace"],
            "job": handle["job"],
            "phase": phase,
            "active": status.active or 0,
            "ready": status.ready or 0,
            "succeeded": status.succeeded or 0,
            "failed": status.failed or 0,
            "start_time": _iso(status.start_time),
            "completion_time": _iso(status.completion_time),
            "pods": [pod_facts(p) for p in pods],
        }

    # ---- logs ----

    def logs(self, record: RunRecord, cursor: dict[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
        """Every rank's new lines in time order, tagged `[rank N]` when there are several ranks."""
        handle, cluster = self._handle(record)
        ns, job = handle["namespace"], handle["job"]
        book = _LogCursor(cursor)
        entries: list[tuple[int, int, int, str]] = []
        for pod in cluster.pods(ns, job).items or []:
            if not container_started(pod):
                continue
            rank = pod_rank(pod)
            for seq, (ns_time, text) in enumerate(self._read_log(cluster, ns, pod.metadata.name, book)):
                entries.append((ns_time, rank, seq, text))
        return _tagged(entries, int(handle.get("nnodes") or 1) > 1), book.to_json()

    def _read_log(self, cluster: _Cluster, ns: str, pod: str, book: _LogCursor) -> list[tuple[int, str]]:
        from kubernetes.client.exceptions import ApiException

        cursor = book.pod(pod)
        limit: int | None = LOG_LIMIT_BYTES
        while True:
            since = cursor.begin()

            def fetch(since: str | None = since, limit: int | None = limit, **kwargs: Any) -> bytes:
                response = pod_log_request(
                    cluster.api_client, ns, pod, since=since, limit_bytes=limit, **kwargs
                )
                try:
                    return response.data
                finally:
                    response.release_conn()

            try:
                data = cluster.call(
                    fetch,
                    verb="get",
                    resource="pods/log",
                    namespace=ns,
                    passthrough=(400, 404),
                    attempts=LOG_ATTEMPTS,
                )
            except ApiException as exc:
                if exc.status == 404 or _not_started(exc):
                    return []  # not started yet, or gone: nothing to read
                raise UsageError(
                    f"Kubernetes get pods/log in namespace {ns} failed: 400 {api_message(exc)}"
                ) from None
            text = data.decode("utf-8", errors="replace")
            cut = limit is not None and len(data) >= limit
            if cut:
                text = text[: text.rfind("\n") + 1]  # the last line was cut short: the next read has it
            if not text:
                return []  # a running container that has written nothing yet
            lines: list[tuple[int, str]] = []
            previous: tuple[int, str] | None = None
            for line in text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"):
                ns_time, stamp, body = split_stamp(line)
                if ns_time is None:  # no timestamp: part of the line before it
                    if previous is None:
                        lines.append((cursor.last or 0, body))
                        continue
                    ns_time, stamp = previous
                previous = (ns_time, stamp)
                if cursor.accept(ns_time, stamp):
                    lines.append((ns_time, body))
            if lines or not cut or limit is None:
                return lines
            limit = None  # a whole window of lines already delivered: read the rest at once

    def follow(
        self, record: RunRecord, cursor: dict[str, Any] | None = None, poll_s: float = 1.0
    ) -> Iterator[tuple[list[str], dict[str, Any]]]:
        """Lines as they arrive, as (lines, cursor) with the cursor format of logs(); a thread follows each
        pod's log stream. Ends once the Job has ended (or is gone) and every pod's log was read to its end."""
        handle, cluster = self._handle(record)
        ns, job = handle["namespace"], handle["job"]
        several = int(handle.get("nnodes") or 1) > 1
        book = _LogCursor(cursor)
        arrivals: queue.Queue = queue.Queue()
        streams: dict[str, _LogStream] = {}
        ranks: dict[str, int] = {}
        phases: dict[str, str] = {}
        done: set[str] = set()  # pods whose log was read to the end of their container
        broken: dict[str, int] = {}  # streams in a row that ended without reaching the end of the log
        job_over = False
        previous: dict[str, tuple[int, str]] = {}
        seq = 0
        next_poll = 0.0
        try:
            while True:
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + poll_s
                    job_over = self._job_over(cluster, ns, job)
                    pods = cluster.pods(ns, job).items or []
                    for pod in pods:
                        name = pod.metadata.name
                        ranks[name], phases[name] = pod_rank(pod), pod.status.phase
                        stream = streams.get(name)
                        if name in done or not container_started(pod) or (stream and not stream.finished):
                            continue
                        streams[name] = _LogStream(cluster, ns, name, book.pod(name).begin(), arrivals)
                    running = [s for s in streams.values() if not s.finished]
                    listed = {p.metadata.name for p in pods if container_started(p)}
                    if job_over and not running and arrivals.empty() and listed <= done:
                        return
                lines: list[tuple[int, int, int, str]] = []
                deadline = min(next_poll, time.monotonic() + 0.2)
                while True:
                    try:
                        name, kind, payload = arrivals.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        break
                    if kind == "end":
                        streams[name].finished = True
                        if isinstance(payload, UsageError):
                            raise payload
                        broken[name] = 0 if payload == "eof" else broken.get(name, 0) + 1
                        if payload == "eof" and phases.get(name) in ENDED_PHASES:
                            done.add(name)
                        elif job_over and broken[name] >= FOLLOW_GIVE_UP:
                            done.add(name)  # its node no longer serves the log
                        continue
                    ns_time, stamp, text = split_stamp(payload)
                    if ns_time is None:
                        ns_time, stamp = previous.get(name, (book.pod(name).last or 0, ""))
                    previous[name] = (ns_time, stamp)
                    if book.pod(name).accept(ns_time, stamp):
                        seq += 1
                        lines.append((ns_time, ranks.get(name, 0), seq, text))
                if lines:
                    yield _tagged(lines, several), book.to_json()
        finally:
            for stream in streams.values():
                stream.close()

    def _job_over(self, cluster: _Cluster, ns: str, job: str) -> bool:

        obj = _read_job(cluster, ns, job)
        if obj is None:
            return True
        return any(
            c.type in ("Complete", "Failed") and c.status == "True" for c in obj.status.conditions or []
        )

    # ---- stop ----

    def stop(self, record: RunRecord, grace_s: float = 15.0) -> RunStatus:
        """Delete the Job (its pods in the background), the Service, the ConfigMap and the PodGroup; the
        pods get their terminationGracePeriodSeconds from Kubernetes. A later status() says "stopped"."""
        if not (record.handle or {}).get("job"):
            return RunStatus("stopped", ended_at=time.time(), message="no Kubernetes Job was started")
        handle, cluster = self._handle(record)
        ns = handle["namespace"]
        self._forget(handle)
        self._delete(cluster, ns, "jobs", cluster.batch.delete_namespaced_job, handle["job"])
        self._delete(cluster, ns, "services", cluster.core.delete_namespaced_service, handle["service"])
        self._delete(
            cluster, ns, "configmaps", cluster.core.delete_namespaced_config_map, handle["configmap"]
        )
        if handle.get("podgroup"):
            self._delete(
                cluster,
                ns,
                f"{PODGROUPS}.{VOLCANO_GROUP}",
                self._delete_podgroup(cluster),
                handle["podgroup"],
            )
        stopped = {**handle, "stop_requested": True, "stop_requested_at": time.time()}
        return RunStatus(
            "stopping", handle=stopped, detail={"namespace": ns, "job": handle["job"], "phase": "Deleting"}
        )

    @staticmethod
    def _delete_podgroup(cluster: _Cluster) -> Callable[..., Any]:
        def delete(name: str, namespace: str, **kwargs: Any) -> Any:
            return cluster.custom.delete_namespaced_custom_object(
                VOLCANO_GROUP, VOLCANO_VERSION, namespace, PODGROUPS, name, **kwargs
            )

        return delete


def _read_job(cluster: _Cluster, ns: str, job: str) -> Any:
    """The Job object, or None when it no longer exists."""
    from kubernetes.client.exceptions import ApiException

    try:
        return cluster.call(
            cluster.batch.read_namespaced_job,
            job,
            ns,
            verb="get",
            resource="jobs",
            namespace=ns,
            passthrough=(404,),
        )
    except ApiException:
        return None
