"""A small Kubernetes API server for tests: the endpoints the Kubernetes backend uses, with the real JSON
shapes (metadata with resourceVersion, Status objects on errors, watch events, pod logs with timestamps).

It runs on 127.0.0.1 in a thread with its own event loop. Creating a Job makes its pods, one per
completion index, the way the Job controller does; a test then drives them (phase, exit code, scheduling,
log lines) and the server's behaviour (injected 5xx, 403, expired watches) through thread-safe methods.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import itertools
import json
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from aiohttp import web

CORE = ("", "v1")
BATCH = ("batch", "v1")
VOLCANO = ("scheduling.volcano.sh", "v1beta1")
# (group, version, plural) -> kind
KINDS = {
    (*CORE, "configmaps"): "ConfigMap",
    (*CORE, "services"): "Service",
    (*CORE, "pods"): "Pod",
    (*BATCH, "jobs"): "Job",
    (*VOLCANO, "podgroups"): "PodGroup",
}
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
CONFIGMAP_MAX_BYTES = 1 << 20
RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$")
ENDED = ("Succeeded", "Failed")


def rfc3339_nano(ns: int) -> str:
    """As the kubelet writes log timestamps: RFC3339 with nanoseconds, trailing zeros dropped."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    stamp = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{fraction:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"


def parse_rfc3339(text: str) -> int:
    match = RFC3339.match(text)
    if not match:
        raise ValueError(text)
    whole, fraction, zone = match.groups()
    offset = "+00:00" if zone == "Z" else zone
    seconds = int(datetime.fromisoformat(whole + offset).timestamp())
    return seconds * 1_000_000_000 + int((fraction or "0").ljust(9, "0"))


def truthy(value: str | None) -> bool:
    """A boolean query parameter as the API server's Go parser reads it (the Python client sends "True")."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_object(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.body = status_object(code, reason, message, details)


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.replace("==", "=").partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def merge_patch(target: dict, patch: dict) -> dict:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class FakeKubeAPI:
    """The fake API server. Methods not starting with an underscore are for the test thread."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token or secrets.token_hex(16)
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-k8s-api", daemon=True)
        self._runner: web.AppRunner | None = None
        self._reset_state()

    def _reset_state(self) -> None:
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, namespace, name) -> object
        self._rv = itertools.count(1000)
        self._current_rv = 999
        self._events: list[tuple[int, str, dict[str, Any]]] = []  # pod watch history: (rv, type, pod)
        self._expired_below = 0  # watches from a resourceVersion below this get 410 Gone
        self._subscribers: set[asyncio.Queue] = set()
        self._logs: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self._log_changed: asyncio.Condition | None = None
        self._failures: list[tuple[int, str | None, str | None]] = []  # (status, verb, plural)
        self._forbidden: set[tuple[str, str]] = set()
        self.requests: list[tuple[str, str, str]] = []  # (verb, resource, path) of authorised requests
        self.volcano = True  # whether the Volcano PodGroup resource exists

    # ---- life ----

    def start(self) -> str:
        self._thread.start()
        self.url = self._run_async(self._start())
        return self.url

    async def _start(self) -> str:
        self._log_changed = asyncio.Condition()
        app = web.Application(middlewares=[self._middleware])
        app.router.add_route("*", "/api/v1/namespaces/{namespace}/pods/{name}/log", self._pod_log)
        app.router.add_route("*", "/api/{version}/namespaces/{namespace}/{plural}", self._collection)
        app.router.add_route("*", "/api/{version}/namespaces/{namespace}/{plural}/{name}", self._item)
        app.router.add_route("*", "/apis/{group}/{version}/namespaces/{namespace}/{plural}", self._collection)
        app.router.add_route(
            "*", "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}", self._item
        )
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._run_async(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _stop(self) -> None:
        await self._close_watches()
        assert self._runner is not None
        await self._runner.cleanup()

    def reset(self) -> None:
        """Forget every object, log and injected failure (between tests)."""

        async def reset() -> None:
            await self._close_watches()
            self._reset_state()
            self._log_changed = asyncio.Condition()

        self._run_async(reset())

    def write_kubeconfig(self, path: Path, namespace: str | None = "ml", context: str = "fake") -> Path:
        """A kubeconfig with token auth for this server (JSON is YAML too)."""
        ctx: dict[str, Any] = {"cluster": "fake-cluster", "user": "tester"}
        if namespace:
            ctx["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake-cluster", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": self.token}}],
            "contexts": [{"name": context, "context": ctx}],
            "current-context": context,
        }
        path.write_text(json.dumps(config, indent=1))
        return path

    # ---- the test's view and controls (thread-safe) ----

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._call(lambda: copy.deepcopy(self._objects.get((plural, namespace, name))))

    def list(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        def pick() -> list[dict[str, Any]]:
            return [
                copy.deepcopy(obj)
                for (kind, ns, _), obj in sorted(self._objects.items())
                if kind == plural and namespace in (None, ns)
            ]

        return self._call(pick)

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """The Job's pods, by completion index."""
        pods = [p for p in self.list("pods", namespace) if p["metadata"]["labels"].get("job-name") == job]
        return sorted(
            pods, key=lambda p: int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
        )

    def pod_name(self, namespace: str, job: str, index: int) -> str:
        for pod in self.job_pods(namespace, job):
            if pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == str(index):
                return pod["metadata"]["name"]
        raise KeyError(f"{job} has no pod with index {index}")

    def set_pod_phase(
        self,
        namespace: str,
        pod: str,
        phase: str,
        exit_code: int | None = None,
        reason: str | None = None,
        node: str = "ip-10-0-1-17.us-west-2.compute.internal",
    ) -> None:
        """Running, Succeeded or Failed (with the container's exit code and reason); the Job follows."""
        self._call(lambda: self._set_phase(namespace, pod, phase, exit_code, reason, node))
        self._notify_logs()

    def set_pod_unschedulable(self, namespace: str, pod: str, message: str) -> None:
        def change(obj: dict[str, Any]) -> None:
            obj["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": now_iso(),
                }
            ]

        self._call(lambda: self._modify_pod(namespace, pod, change))

    def set_pod_waiting(self, namespace: str, pod: str, reason: str, message: str) -> None:
        """The container waits to start (ImagePullBackOff, CreateContainerConfigError...)."""

        def change(obj: dict[str, Any]) -> None:
            obj["spec"]["nodeName"] = "ip-10-0-1-17.us-west-2.compute.internal"
            obj["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_iso()}
            ]
            container = obj["spec"]["containers"][0]
            obj["status"]["containerStatuses"] = [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {"waiting": {"reason": reason, "message": message}},
                }
            ]

        self._call(lambda: self._modify_pod(namespace, pod, change))

    def append_log(self, namespace: str, pod: str, *lines: str, at: float | int | None = None) -> None:
        """Lines written by the pod's container; `at` is their time (epoch seconds, or int nanoseconds)."""
        if at is None:
            stamp = time.time_ns()
        elif isinstance(at, int):
            stamp = at
        else:
            stamp = round(at * 1_000_000_000)

        def add() -> None:
            self._logs.setdefault((namespace, pod), []).extend((stamp, line) for line in lines)

        self._call(add)
        self._notify_logs()

    def fail_next(
        self, count: int, status: int = 503, verb: str | None = None, plural: str | None = None
    ) -> None:
        """Answer the next `count` matching requests with `status` (a Status object, as the server does)."""
        self._call(lambda: self._failures.extend([(status, verb, plural)] * count))

    def forbid(self, verb: str, plural: str) -> None:
        """Answer 403 Forbidden to `verb` on `plural`, as RBAC does, until reset."""
        self._call(lambda: self._forbidden.add((verb, plural)))

    def delete_job(self, namespace: str, name: str) -> None:
        """Someone else deletes the Job (kubectl delete job), with its pods."""
        self._call(lambda: self._delete(("jobs", namespace, name), "Background"))

    def expire_watches(self) -> None:
        """Compaction: open watches end and resuming from any resourceVersion seen so far gets 410 Gone."""

        async def expire() -> None:
            self._expired_below = self._current_rv + 1
            await self._close_watches()

        self._run_async(expire())

    def count(self, verb: str, plural: str) -> int:
        return self._call(lambda: sum(1 for v, p, _ in self.requests if (v, p) == (verb, plural)))

    # ---- plumbing between threads ----

    def _run_async(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def _call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return self._run_async(run())

    def _notify_logs(self) -> None:
        async def notify() -> None:
            assert self._log_changed is not None
            async with self._log_changed:
                self._log_changed.notify_all()

        self._run_async(notify())

    async def _close_watches(self) -> None:
        for queue in list(self._subscribers):
            queue.put_nowait(None)
        self._subscribers.clear()
        if self._log_changed is not None:
            async with self._log_changed:
                self._log_changed.notify_all()

    # ---- the store ----

    def _next_rv(self) -> str:
        self._current_rv = next(self._rv)
        return str(self._current_rv)

    def _store(self, plural: str, obj: dict[str, Any], event: str) -> None:
        meta = obj["metadata"]
        meta["resourceVersion"] = self._next_rv()
        key = (plural, meta["namespace"], meta["name"])
        if event == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj
        if plural == "pods":
            snapshot = copy.deepcopy(obj)
            self._events.append((self._current_rv, event, snapshot))
            for queue in self._subscribers:
                queue.put_nowait((self._current_rv, event, snapshot))

    def _create(self, group: str, version: str, plural: str, namespace: str, body: dict[str, Any]) -> dict:
        kind = KINDS[(group, version, plural)]
        meta = body.setdefault("metadata", {})
        name = meta.get("name") or ""
        resource = f"{plural}.{group}" if group else plural
        self._validate(kind, plural, name, body)
        if (plural, namespace, name) in self._objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{resource} "{name}" already exists',
                {"name": name, "group": group, "kind": plural},
            )
        body["apiVersion"] = f"{group}/{version}" if group else version
        body["kind"] = kind
        meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now_iso(), generation=1)
        meta.setdefault("labels", {})
        if kind == "Job":
            body["spec"].setdefault("suspend", False)
            body["status"] = {}
        self._store(plural, body, "ADDED")
        if kind == "Job" and not body["spec"]["suspend"]:
            self._start_job(body)
        return body

    def _validate(self, kind: str, plural: str, name: str, body: dict[str, Any]) -> None:
        causes = []
        pattern, limit = (LABEL_1035, 63) if kind == "Service" else (SUBDOMAIN, 253)
        if kind == "Job":
            pattern, limit = LABEL_1123, 63
        if not name or not pattern.match(name) or len(name) > limit:
            causes.append(f"metadata.name: Invalid value: {name!r}: must be a DNS name of at most {limit}")
        if kind == "ConfigMap":
            size = sum(len(v) for v in (body.get("data") or {}).values())
            size += sum(len(base64.b64decode(v)) for v in (body.get("binaryData") or {}).values())
            if size > CONFIGMAP_MAX_BYTES:
                causes.append(f"[]: Too long: must have at most {CONFIGMAP_MAX_BYTES} bytes")
        if kind == "Job":
            for key, value in body["spec"]["template"]["metadata"].get("labels", {}).items():
                if len(value) > 63 or (
                    value and not re.match(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", value)
                ):
                    causes.append(f"spec.template.metadata.labels: Invalid value: {key}={value!r}")
        if causes:
            raise ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {"; ".join(causes)}')

    def _start_job(self, job: dict[str, Any]) -> None:
        """What the Job controller does for an indexed Job: one pod per completion index."""
        meta, spec = job["metadata"], job["spec"]
        name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
        template = spec["template"]
        for index in range(spec["completions"]):
            pod_spec = copy.deepcopy(template["spec"])
            pod_spec["hostname"] = f"{name}-{index}"
            for container in pod_spec["containers"]:
                container.setdefault("env", []).append(
                    {
                        "name": "JOB_COMPLETION_INDEX",
                        "valueFrom": {
                            "fieldRef": {
                                "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"
                            }
                        },
                    }
                )
            labels = dict(template["metadata"].get("labels") or {})
            labels.update(
                {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": name,
                    "controller-uid": uid,
                    "job-name": name,
                    "batch.kubernetes.io/job-completion-index": str(index),
                }
            )
            annotations = dict(template["metadata"].get("annotations") or {})
            annotations["batch.kubernetes.io/job-completion-index"] = str(index)
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{index}-{secrets.token_hex(3)[:5]}",
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": now_iso(),
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": name,
                            "uid": uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": pod_spec,
                "status": {"phase": "Pending", "qosClass": "Burstable"},
            }
            self._store("pods", pod, "ADDED")
        job["status"] = {"active": spec["completions"], "ready": 0, "startTime": now_iso()}
        self._store("jobs", job, "MODIFIED")

    def _modify_pod(self, namespace: str, pod: str, change: Callable[[dict[str, Any]], None]) -> None:
        obj = self._objects.get(("pods", namespace, pod))
        if obj is None:
            raise KeyError(pod)
        obj = copy.deepcopy(obj)
        change(obj)
        self._store("pods", obj, "MODIFIED")

    def _set_phase(
        self, namespace: str, pod: str, phase: str, exit_code: int | None, reason: str | None, node: str
    ) -> None:
        def change(obj: dict[str, Any]) -> None:
            container = obj["spec"]["containers"][0]
            status = obj["status"]
            status["phase"] = phase
            obj["spec"]["nodeName"] = node
            status.setdefault("startTime", now_iso())
            status["hostIP"] = "10.0.1.17"
            status["podIP"] = "10.0.1.201"
            state: dict[str, Any]
            if phase == "Running":
                state = {"running": {"startedAt": now_iso()}}
            else:
                code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
                state = {
                    "terminated": {
                        "exitCode": code,
                        "reason": reason or ("Completed" if code == 0 else "Error"),
                        "startedAt": status["startTime"],
                        "finishedAt": now_iso(),
                        "containerID": "containerd://" + secrets.token_hex(8),
                    }
                }
            status["containerStatuses"] = [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": container["image"] + "@sha256:" + "0" * 64,
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "started": phase == "Running",
                    "state": state,
                }
            ]
            status["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_iso()},
                {"type": "Ready", "status": str(phase == "Running"), "lastTransitionTime": now_iso()},
            ]

        self._modify_pod(namespace, pod, change)
        self._job_controller(self._objects[("pods", namespace, pod)])

    def _job_controller(self, pod: dict[str, Any]) -> None:
        labels = pod["metadata"]["labels"]
        job = self._objects.get(("jobs", pod["metadata"]["namespace"], labels.get("job-name", "")))
        if job is None or job["status"].get("conditions"):
            return
        job = copy.deepcopy(job)
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        pods = [p for (k, ns, _), p in self._objects.items() if k == "pods" and ns == namespace]
        pods = [p for p in pods if p["metadata"]["labels"].get("job-name") == name]
        phases = [p["status"]["phase"] for p in pods]
        status = job["status"]
        status.update(
            active=sum(1 for p in phases if p not in ENDED),
            ready=sum(1 for p in phases if p == "Running"),
            succeeded=phases.count("Succeeded"),
            failed=phases.count("Failed"),
        )
        if status["failed"] > job["spec"].get("backoffLimit", 6):
            stamp = now_iso()
            status["conditions"] = [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastProbeTime": stamp,
                    "lastTransitionTime": stamp,
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastProbeTime": stamp,
                    "lastTransitionTime": stamp,
                },
            ]
            # The controller removes the pods still active once the Job has failed.
            for other in pods:
                if other["status"]["phase"] not in ENDED:
                    self._store("pods", copy.deepcopy(other), "DELETED")
            status["active"] = status["ready"] = 0
        elif status["succeeded"] >= job["spec"]["completions"]:
            stamp = now_iso()
            status["completionTime"] = stamp
            status["completedIndexes"] = f"0-{job['spec']['completions'] - 1}"
            status["conditions"] = [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": stamp},
                {"type": "Complete", "status": "True", "lastProbeTime": stamp, "lastTransitionTime": stamp},
            ]
        self._store("jobs", job, "MODIFIED")

    def _delete(self, key: tuple[str, str, str], propagation: str | None) -> dict[str, Any]:
        obj = self._objects[key]
        self._store(key[0], copy.deepcopy(obj), "DELETED")
        uid = obj["metadata"]["uid"]
        dependents = [
            k
            for k, o in self._objects.items()
            if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])
        ]
        for dependent in dependents:
            if propagation in ("Background", "Foreground"):
                self._delete(dependent, propagation)
            else:  # orphaned: what the API does for a Job deleted without a propagation policy
                orphan = copy.deepcopy(self._objects[dependent])
                orphan["metadata"]["ownerReferences"] = [
                    r for r in orphan["metadata"]["ownerReferences"] if r.get("uid") != uid
                ]
                self._store(dependent[0], orphan, "MODIFIED")
        return obj

    # ---- HTTP ----

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response(status_object(401, "Unauthorized", "Unauthorized"), status=401)
        info = request.match_info
        plural = info.get("plural", "pods")
        group = info.get("group", "")
        namespace = info.get("namespace", "")
        verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}.get(
            request.method, "get"
        )
        if request.method == "GET" and "name" not in info:
            verb = "watch" if truthy(request.query.get("watch")) else "list"
        resource = "pods/log" if request.path.endswith("/log") else plural
        self.requests.append((verb, resource, request.path_qs))
        for i, (status, want_verb, want_plural) in enumerate(self._failures):
            if want_verb in (None, verb) and want_plural in (None, resource):
                del self._failures[i]
                reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}
                body = status_object(status, reason.get(status, "InternalError"), f"synthetic {status}")
                headers = {"Retry-After": "0"} if status == 429 else None
                return web.json_response(body, status=status, headers=headers)
        if (verb, resource) in self._forbidden:
            api_group = f' in API group "{group}"' if group else ' in API group ""'
            full = f"{resource}.{group}" if group else resource
            message = (
                f'{full} is forbidden: User "tester" cannot {verb} resource "{resource}"{api_group} '
                f'in the namespace "{namespace}"'
            )
            details = {"group": group, "kind": resource}
            return web.json_response(status_object(403, "Forbidden", message, details), status=403)
        try:
            return await handler(request)
        except ApiError as exc:
            return web.json_response(exc.body, status=exc.body["code"])

    def _resource(self, request: web.Request) -> tuple[str, str, str]:
        info = request.match_info
        group, version, plural = info.get("group", ""), info["version"], info["plural"]
        if (group, version, plural) not in KINDS or (group == VOLCANO[0] and not self.volcano):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return group, version, plural

    async def _collection(self, request: web.Request) -> web.StreamResponse:
        group, version, plural = self._resource(request)
        namespace = request.match_info["namespace"]
        if request.method == "POST":
            if plural == "pods":
                raise ApiError(405, "MethodNotAllowed", "pods are made by the Job controller here")
            body = await request.json()
            return web.json_response(self._create(group, version, plural, namespace, body), status=201)
        if request.method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on {plural}")
        selector = request.query.get("labelSelector")
        if truthy(request.query.get("watch")):
            return await self._watch(request, plural, namespace, selector)
        items = [
            copy.deepcopy(obj)
            for (kind, ns, _), obj in sorted(self._objects.items())
            if kind == plural and ns == namespace and selector_matches(selector, obj["metadata"]["labels"])
        ]
        kind = KINDS[(group, version, plural)]
        return web.json_response(
            {
                "apiVersion": f"{group}/{version}" if group else version,
                "kind": f"{kind}List",
                "metadata": {"resourceVersion": str(self._current_rv)},
                "items": items,
            }
        )

    async def _item(self, request: web.Request) -> web.StreamResponse:
        group, _, plural = self._resource(request)
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        key = (plural, namespace, name)
        resource = f"{plural}.{group}" if group else plural
        if key not in self._objects:
            raise ApiError(
                404,
                "NotFound",
                f'{resource} "{name}" not found',
                {"name": name, "group": group, "kind": plural},
            )
        if request.method == "GET":
            return web.json_response(self._objects[key])
        if request.method == "DELETE":
            propagation = request.query.get("propagationPolicy")
            if request.can_read_body:
                text = await request.text()
                options = json.loads(text) if text.strip() else {}
                propagation = (options or {}).get("propagationPolicy") or propagation
            obj = self._delete(key, propagation)
            return web.json_response(obj)
        if request.method == "PATCH":
            if request.content_type != "application/merge-patch+json":
                message = f"the body of the request was in an unknown format: {request.content_type}"
                raise ApiError(415, "UnsupportedMediaType", message)
            obj = merge_patch(copy.deepcopy(self._objects[key]), await request.json())
            was_suspended = self._objects[key].get("spec", {}).get("suspend")
            self._store(plural, obj, "MODIFIED")
            if plural == "jobs" and was_suspended and not obj["spec"].get("suspend") and not obj["status"]:
                self._start_job(obj)
            return web.json_response(self._objects[key])
        raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on {plural}")

    async def _watch(
        self, request: web.Request, plural: str, namespace: str, selector: str | None
    ) -> web.StreamResponse:
        if plural != "pods":
            raise ApiError(405, "MethodNotAllowed", "this fake watches pods only")
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        since = request.query.get("resourceVersion")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)

        async def send(event: str, obj: dict[str, Any]) -> None:
            await response.write(json.dumps({"type": event, "object": obj}).encode() + b"\n")

        def ours(obj: dict[str, Any]) -> bool:
            meta = obj["metadata"]
            return meta["namespace"] == namespace and selector_matches(selector, meta["labels"])

        if since and since != "0" and int(since) < self._expired_below:
            message = f"too old resource version: {since} ({self._expired_below})"
            await send("ERROR", status_object(410, "Expired", message))
            return response
        queue: asyncio.Queue = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            if since and since != "0":
                backlog = [(rv, event, obj) for rv, event, obj in self._events if rv > int(since)]
            else:
                backlog = [
                    (int(obj["metadata"]["resourceVersion"]), "ADDED", copy.deepcopy(obj))
                    for (kind, _, _), obj in sorted(self._objects.items())
                    if kind == "pods"
                ]
            last = 0
            for rv, event, obj in backlog:
                if ours(obj):
                    await send(event, obj)
                last = max(last, rv)
            deadline = self._loop.time() + timeout
            while True:
                remaining = deadline - self._loop.time()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(queue.get(), remaining)
                except asyncio.TimeoutError:
                    break
                if item is None:
                    break
                rv, event, obj = item
                if rv > last and ours(obj):
                    await send(event, obj)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._subscribers.discard(queue)
        return response

    async def _pod_log(self, request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        pod = self._objects.get(("pods", namespace, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        container = request.query.get("container") or pod["spec"]["containers"][0]["name"]
        if container not in [c["name"] for c in pod["spec"]["containers"]]:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        statuses = pod["status"].get("containerStatuses") or []
        state = statuses[0]["state"] if statuses else {"waiting": {"reason": "ContainerCreating"}}
        if "waiting" in state:
            raise ApiError(
                400,
                "BadRequest",
                f'container "{container}" in pod "{name}" is waiting to start: {state["waiting"]["reason"]}',
            )
        stamps = truthy(request.query.get("timestamps"))
        since = parse_rfc3339(request.query["sinceTime"]) if request.query.get("sinceTime") else None
        limit = int(request.query["limitBytes"]) if request.query.get("limitBytes") else None

        def render(entries: list[tuple[int, str]]) -> bytes:
            out = []
            for stamp, text in entries:
                if since is not None and stamp < since:
                    continue
                out.append(f"{rfc3339_nano(stamp)} {text}\n" if stamps else f"{text}\n")
            return "".join(out).encode()

        key = (namespace, name)
        if not truthy(request.query.get("follow")):
            body = render(self._logs.get(key, []))
            if limit is not None:
                body = body[:limit]
            return web.Response(body=body, content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        sent = 0
        assert self._log_changed is not None
        try:
            while True:
                entries = self._logs.get(key, [])
                if len(entries) > sent:
                    await response.write(render(entries[sent:]))
                    sent = len(entries)
                current = self._objects.get(("pods", namespace, name))
                if current is None or current["status"]["phase"] in ENDED:
                    break
                async with self._log_changed:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._log_changed.wait(), 0.5)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response
